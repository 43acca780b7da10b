"""``python -m mha.shapecheck PATH::NAME``: check the shape comments of a class or function of a
file against a run of it (see ``mha.shapecheck``); ``--fix`` corrects the wrong ones in place.

Exit status: 0 every comment checked is right; 1 a comment is wrong; 2 the target could not be
run as asked (a bad argument, or its import, constructor or call raised); 3 nothing was checked.
"""

from __future__ import annotations

import argparse
import sys

import mha.shapecheck
from mha.shapecheck import Report

ARGUMENTS = ("target", "--init", "--input", "--sizes")
"""How the command's errors name its arguments (``check``'s target, init, inputs, sizes)."""


def parser() -> argparse.ArgumentParser:
    """The command's arguments (the pytest plugin's ``--shapecheck`` takes the same)."""
    found = argparse.ArgumentParser(
        prog="python -m mha.shapecheck",
        description="Check the shape comments of a class or function against a run of it.",
        epilog="exit status: 0 right, 1 a wrong comment, 2 could not run, 3 nothing checked",
    )
    found.add_argument("target", metavar="PATH::NAME", help="a class or function of a file")
    found.add_argument(
        "--init", metavar="ARGS", help='the constructor\'s arguments: "hidden_size=24, heads_num=6"'
    )
    found.add_argument(
        "--input",
        metavar="ARGS",
        help='the inputs, a list being a shape: "x=[5, 7, 24]" (the others are guessed)',
    )
    found.add_argument(
        "--sizes", metavar="SIZES", help='sizes the comments name: "batch_size=5, nh=n_head"'
    )
    found.add_argument("--fix", action="store_true", help="correct the wrong comments in place")
    found.add_argument("-v", "--verbose", action="store_true", help="list the right ones too")
    return found


def traced(arguments: argparse.Namespace) -> mha.shapecheck.Run:
    """The run the parsed ``arguments`` ask for; bad values raise ``ValueError`` or
    ``TypeError`` naming the command's argument."""
    return mha.shapecheck.run(
        arguments.target, arguments.init, arguments.input, arguments.sizes, ARGUMENTS
    )


def run(arguments: argparse.Namespace) -> Report:
    """The report of the check the parsed ``arguments`` ask for."""
    return traced(arguments).report()


def main(argv: list[str] | None = None) -> int:
    """Run the command with ``argv`` (the process's arguments by default); its exit status."""
    arguments = parser().parse_args(argv)
    try:
        checked = traced(arguments)
    except (TypeError, ValueError) as error:
        print(f"python -m mha.shapecheck: error: {error}", file=sys.stderr)
        return 2
    report = checked.report()
    print(report.text(arguments.verbose))
    if not arguments.fix or not report.wrong:
        return report.exit_code
    fixed = report.fix()
    left = len(report.wrong) - fixed
    kept = f" ({left} wrong left as {'it is' if left == 1 else 'they are'}: not fixed above)"
    if not fixed:
        print("fixed nothing" + kept)
        return report.exit_code
    files = sorted({f.file for f in report.wrong if f.corrected is not None})
    again = checked.report()  # the same run, the file's comments as they are now
    plural = "" if fixed == 1 else "s"
    print(f"fixed {fixed} comment{plural} in {', '.join(files)}{kept if left else ''}; ", end="")
    print("checked again: " + again.text().splitlines()[-1])
    return again.exit_code


if __name__ == "__main__":
    sys.exit(main())
