"""The ``Examples:`` section every ``--help`` ends with (before the exit codes), as kafka-dump-log.sh
users expect: one or two command lines to copy, never rewrapped.

Only click-free string work here, so ``kcompact --help`` stays fast. ``tests/cli/test_help.py`` checks
that every command and group has examples, that each names real options of a real command, and that
each fits 80 columns.
"""

from __future__ import annotations


def with_examples(epilog: str, *examples: str) -> str:
    """An epilog: ``Examples:``, the command lines (click's ``\\b`` keeps them unwrapped), then ``epilog``.

    Args:
        epilog: what the help ends with (the exit codes).
        examples: whole command lines, each starting with ``kcompact``.

    Returns:
        The epilog text for ``@click.command(epilog=...)``.
    """
    lines = "\n".join(f"  {example}" for example in examples)
    return f"Examples:\n\n\b\n{lines}\n\n{epilog}"
