"""Every skip says why, also under -q (ctest runs these files with -q)."""


def pytest_terminal_summary(terminalreporter):
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        terminalreporter.write_line(f"SKIPPED {report.nodeid}: {reason}")
