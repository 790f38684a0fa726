"""Entry points: the HTTP API and the command line. Thin: parse, call a use case, render."""
