"""The `jobsight` subcommands, one module each (`configure(parser)`, `run(args)`): options and
output only; figures come from the read API (analytics/queries), writes through the store."""
