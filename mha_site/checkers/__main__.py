"""``python -m mha_site.checkers [NAME ...]``: run the consistency checkers (all by default), print
each problem, and exit with 1 if there is any."""

from __future__ import annotations

import argparse
import sys
import time

from mha_site.checkers import CHECKERS, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_site.checkers", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"one of {', '.join(CHECKERS)}")
    names = parser.parse_args(argv).names or list(CHECKERS)
    failed = 0
    for name in names:
        start = time.perf_counter()
        problems = load(name).check()
        seconds = time.perf_counter() - start
        status = "ok" if not problems else f"{len(problems)} problem(s)"
        print(f"{name:<20} {status:<16} {seconds:5.1f} s")
        for problem in problems:
            print(f"  - {problem}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
