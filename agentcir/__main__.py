"""``python -m agentcir``: the ``agentcir`` command (:mod:`agentcir.cli`), e.g. for an MCP client's
server command: ``python -m agentcir mcp --gallery G``."""

import sys

from .cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
