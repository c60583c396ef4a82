"""`gatehouse ext-authz --config FILE`: run the Authorization service for Envoy."""

from __future__ import annotations

import argparse

from ext_authz.admin.service import CredentialError
from ext_authz.config import ExtAuthzConfig, load_ext_authz_config
from ext_authz.runtime import ExtAuthz
from gatehouse.commands.serve import Workers, add_service_parser, run_service


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_service_parser(subparsers, "ext-authz", help="run the ext_authz Authorization service (JWT, revocation)",
                       what="ext_authz", run=run)


def workers(config: ExtAuthzConfig) -> Workers:
    addresses = [config.listen]
    if config.http is not None:
        addresses.append(config.http.listen)
    if config.admin is not None:
        addresses.append(config.admin.listen)
    return Workers(config.workers, tuple(addresses), config.metrics.listen)


def run(args: argparse.Namespace) -> int:
    return run_service(args, load_ext_authz_config, ExtAuthz, startup_errors=(CredentialError,), workers=workers, uvloop=True)
