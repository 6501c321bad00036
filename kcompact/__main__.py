"""``python -m kcompact`` runs the command-line interface."""

from kcompact.cli.main import main

main()
