"""The ``dynaval`` command: one module per room of commands, :mod:`.main` puts them together."""
