"""Name the report's screenshots at the end of the run, where a person finds them."""

from __future__ import annotations

import pytest

from tests.report.browser import SCREENSHOTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for shot in SCREENSHOTS:
        terminalreporter.write_line(f"kcompact: screenshot of the report's page saved at {shot}")
