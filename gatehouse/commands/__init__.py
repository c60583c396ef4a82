"""One module per `gatehouse` subcommand, each with ``add_parser`` and ``run``."""
