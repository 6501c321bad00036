#!/usr/bin/env python3
"""Make README's screenshot of ``kcompact report``: docs/report.png, the top of the page in headless chromium.

    python scripts/report_screenshot.py            # writes docs/report.png (needs chromium and playwright)

The page is the one the browser test opens (tests/report/test_browser.py): two log dirs, the project's
fixtures/sample-logdir and one built by the tests' builders with duplicates a clean removes and a hanging
transaction, at the tests' clock, so the picture is the same from run to run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.report.browser import browser_missing, open_page  # noqa: E402 - after the sys.path line above
from tests.report.test_report import NOW, mixed_log_dir, run  # noqa: E402 - after the sys.path line above

OUTPUT = ROOT / "docs" / "report.png"


def main() -> int:
    missing = browser_missing()
    if missing is not None:
        print(f"report_screenshot: {missing}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        # two brokers' log dirs, named relative to the scratch directory: the picture shows no machine's paths
        mixed_log_dir(work / "broker1" / "kafka-logs")
        shutil.copytree(ROOT / "fixtures" / "sample-logdir", work / "broker2" / "kafka-logs")
        page = work / "report.html"
        os.chdir(work)
        done = run("report", "broker1/kafka-logs", "broker2/kafka-logs", "--now-ms", str(NOW), "--config",
                   "cleanup.policy=compact", "--output", str(page))
        if done.exit_code != 0:
            print(done.output, file=sys.stderr)
            return 1
        with open_page(page, work / "profile") as visit:
            visit.page.screenshot(path=str(OUTPUT))
        os.chdir(ROOT)
    print(f"report_screenshot: wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
