"""The ``dynaval`` command. Every failure is one line on stderr and a non-zero exit, never a traceback.

Each room of commands adds its own (``service``, ``models``, ``validation``, ``agreement``,
``releases``, ``regression``, ``health``); what they share is in :mod:`.common`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from dynaval.domain.errors import DomainError
from dynaval.entrypoints.cli.agreement import add_agreement_command
from dynaval.entrypoints.cli.common import EXIT_USAGE, CommandError
from dynaval.entrypoints.cli.dataset import add_dataset_commands
from dynaval.entrypoints.cli.health import add_health_commands
from dynaval.entrypoints.cli.jobs import add_jobs_commands
from dynaval.entrypoints.cli.models import add_model_commands
from dynaval.entrypoints.cli.regression import add_regression_commands
from dynaval.entrypoints.cli.releases import add_release_commands
from dynaval.entrypoints.cli.retraining import add_retraining_commands
from dynaval.entrypoints.cli.service import add_service_commands
from dynaval.entrypoints.cli.validation import add_validation_commands


def build_parser() -> argparse.ArgumentParser:

    parser = argparse.ArgumentParser(
        prog="dynaval",
        description="Validate adversarial examples with several annotators (see README.md and docs/cli.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_service_commands(commands)
    add_model_commands(commands)
    add_validation_commands(commands)
    add_agreement_command(commands)
    add_release_commands(commands)
    add_dataset_commands(commands)
    add_regression_commands(commands)
    add_health_commands(commands)
    add_jobs_commands(commands)
    add_retraining_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except CommandError as exc:
        print(f"dynaval: {exc}", file=sys.stderr)
    except DomainError as exc:
        where = f"{exc.field}: " if exc.field else ""
        print(f"dynaval: {where}{exc.message}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"dynaval: {exc.strerror or exc} ({exc.filename or ''})", file=sys.stderr)
    except Exception as exc:  # no traceback reaches a user; the class name helps a bug report
        if not _is_database_error(exc):
            print(f"dynaval: unexpected error ({type(exc).__name__}); please report it", file=sys.stderr)
            return 1
        print(
            f"dynaval: the database could not be used ({type(exc).__name__}); "
            "check DYNAVAL_DATABASE_URL and that the server answers",
            file=sys.stderr,
        )
    return EXIT_USAGE


def _is_database_error(exc: Exception) -> bool:
    """Whether ``exc`` is SQLAlchemy's. Its module is looked up, not imported: a command that never
    opened the database (``release verify``) raised none, and does not load SQLAlchemy to say so."""
    errors = sys.modules.get("sqlalchemy.exc")
    return errors is not None and isinstance(exc, errors.SQLAlchemyError)


if __name__ == "__main__":
    sys.exit(main())
