"""The credential a command sends to read the control plane's admin port (``GET /status``,
``/status/node``, ``/breakers``): its ``admin.readCredentialFile`` (or the operator one).
Needed only where the control plane's ``admin.openReads`` does not open the reads (the
Helm chart's default); without one nothing is sent."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from servicekit.bearer import read_bearer_credential

ENV = "GATEHOUSE_CONTROL_PLANE_CREDENTIAL"
REFUSED = f"refused the read credential: pass --credential-file PATH (its admin.readCredentialFile) or set ${ENV}"


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--credential-file", type=Path, metavar="PATH", help=f"the control plane's admin read credential (else ${ENV}); where reads are open, none"
    )


def read_headers(path: Path | None) -> dict[str, str]:
    """``Authorization`` for a read, or none (BearerCredentialError names an unusable file)."""
    credential = read_bearer_credential(path) if path is not None else os.environ.get(ENV, "").strip()
    return {"Authorization": f"Bearer {credential}"} if credential else {}
