"""Pure domain: rounds, candidates, votes, decisions, agreement. No I/O here."""
