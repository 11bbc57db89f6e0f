"""Count the results in a `go test -json` stream: pass/fail/skip, top-level and subtests.

Used by tests/compat/kafka_go.sh. Prints the counts, the failed tests, and a package
that failed without a failing test (a panic or a build error ends a package's binary);
exits 1 if anything failed.
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    results: dict[tuple[str, str], str] = {}
    failed_packages: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            action, test = ev.get("Action"), ev.get("Test")
            if action not in ("pass", "fail", "skip"):
                continue
            if test:
                results[(ev.get("Package", ""), test)] = action
            elif action == "fail":
                failed_packages.append(ev.get("Package", ""))
    for label, keep in (("top-level tests", False), ("all tests and subtests", True)):
        counts = {"pass": 0, "fail": 0, "skip": 0}
        for (_, test), action in results.items():
            if keep or "/" not in test:
                counts[action] += 1
        print(f"{label}: pass {counts['pass']}, fail {counts['fail']}, skip {counts['skip']}")
    failed = sorted(f"{pkg} {test}" for (pkg, test), a in results.items() if a == "fail")
    for name in failed:
        print("FAIL", name)
    quiet = [p for p in failed_packages if not any(n.startswith(p + " ") for n in failed)]
    for pkg in quiet:
        print("FAIL", pkg, "(no failing test: a panic, a timeout or a build error)")
    return 1 if failed or failed_packages else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
