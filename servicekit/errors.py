"""The kernel's one error: a config file is wrong.

    ConfigError   a service's config file (or a setting) is wrong: file, field, reason

Each service's own tree (``control_plane.errors``, ``ext_authz.errors``,
``limiter.errors``) covers what happens at run time; a bad config file is the same error
for all of them, and the CLI turns it into exit code 2.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A config file is wrong; the message names the file, the field and the reason."""
