"""Input formats. Each module defines FORMAT (its name), sniff(head, path) -> bool and
parse(path, opts) -> ParseResult. Detection tries them in this order (most specific first)."""
PARSER_MODULES = ("sacct_json", "sidecar_csv", "nvidia_smi", "seff", "pbs", "lsf", "sacct_text")
