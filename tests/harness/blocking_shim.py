"""``python -m tests.harness.blocking_shim SECONDS <gatehouse args>``: a Gatehouse service
whose authorization handler first calls ``time.sleep(SECONDS)``. That is the blocking
call the loop watchdog must catch; the test injects it, no product code knows of it."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from ext_authz import service
from gatehouse.cli import main


def run() -> int:
    seconds = float(sys.argv[1])
    original = service.Authorizer.decide

    async def decide(self: service.Authorizer, headers: Mapping[str, str], extensions: Mapping[str, str]) -> Any:
        time.sleep(seconds)  # the injected blocking call
        return await original(self, headers, extensions)

    service.Authorizer.decide = decide  # type: ignore[method-assign]
    return main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(run())
