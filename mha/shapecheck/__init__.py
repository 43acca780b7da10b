"""Check the shape comments of your own code: run it once, compare every comment with the tensor.

``python -m mha.shapecheck path/to/model.py::MHA`` imports the file, builds the class with sizes
chosen all different (so that a comment that swaps two axes cannot pass), calls its ``forward``
on random float32 inputs on the CPU, under the tracer of ``mha.trace``, and compares each shape
comment of the code that ran with the tensor its line made. It prints each wrong comment as
``file:line: comment says [..], the tensor is [..]`` with the corrected comment, then the comments
it could not check and those it did not understand, each with why, and exits with 1 if any
comment is wrong. ``--fix`` writes the corrected comments into the file (only the comments
change), never this run's numbers where a comment had names. The same check is
[`check`][mha.shapecheck.check] in Python, and ``pytest --shapecheck path::MHA`` (or the
``shapecheck`` fixture) in a test suite.

What a shape comment is (``mha.shapecheck.grammar``): a comment that starts with a bracketed
shape, ``# [batch_size, seq_len, hidden_size]`` or ``# (B, nh, T, hs)``, or says ``shape `[...]```
in backticks; at the end of an assignment's (or a ``return``'s) last line, or alone on the line
just above it. A dimension is a name, a number, or arithmetic of them (``nh * hs``, ``C // nh``);
a leading ``...`` states only the trailing dimensions; ``a -> b`` states the shape before (the
operand: the name the line rebinds, or the one tensor it reads) and after; ``x @ y -> z`` (or
``x``, ``×``) the operands of the line's matrix product. A name is resolved, where the line ran,
from ``--sizes``, then the function's whole-number locals and arguments (``B, T, C = x.size()``),
then the attributes of ``self``, then the locals of the calling functions of the same file, then
the sizes the checker chose (the constructor's arguments, and ``batch_size`` and ``seq_len`` for
the inputs it built). A name none of them knows is taken where first used: from the first line
that ran whose comment has it as its only unknown dimension, every other one agreeing with the
tensor (the report says so). A comment with a name still unknown is *not checked*, never right.
A comment that looks like a shape and is none of these (``# x: (B, T, d)``, ``# b t d_ff``:
``grammar.not_understood``) is *not understood*: listed with why and counted, never skipped.

Exit status of the command: 0 every comment checked is right; 1 a comment is wrong; 2 the target
could not be run as asked (a bad argument, an import, a constructor or a call that raised); 3
nothing was checked (no shape comment, or none that could be checked or understood).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch

from mha.shapecheck import grammar
from mha.shapecheck import target as targets
from mha.shapecheck.engine import (
    MISSING,
    Attached,
    Execution,
    Observed,
    Observer,
    Source,
    code_objects,
    dimension_names,
)

__all__ = ["Finding", "Report", "check"]

WRONG, RIGHT, UNCHECKED, UNREAD = "wrong", "right", "not checked", "not understood"


@dataclass(frozen=True)
class Finding:
    """What one shape comment says, against what its line made.

    Args:
        file: the file, as the report names it (relative to the current folder when inside it).
        line: the comment's line.
        status: ``"wrong"``, ``"right"``, ``"not checked"`` (read, but its line did not run, or
            a name is unknown ...), or ``"not understood"`` (it looks like a shape and the
            grammar does not read it: ``grammar.not_understood`` says why).
        said: the shapes as the comment writes them, ``"[batch_size, heads_num, seq_len,
            head_size]"``.
        stated: the sizes the comment's result shape states, ``(2, 4, 3, 5)`` (a leading
            ``...`` left out); ``None`` when not checked.
        actual: the shape of the tensor the line made, ``(2, 3, 4, 5)``; ``None`` when not
            checked.
        corrected: the whole comment as it should read (``"# [batch_size, seq_len, heads_num,
            head_size]"``), for a wrong one; ``None`` otherwise, and for a wrong one that
            ``not_fixed`` says why it has none.
        message: what the report says after ``file:line:``.
        comment: the comment as it is in the file.
        not_fixed: why a wrong comment has no correction (no name stands for a size, so this
            run's numbers would replace the comment's names; or its line made tensors of
            different shapes); ``None`` otherwise.

    中文:
        一条形状注释说的形状，和这一行实际算出来的张量的对比。

        参数：
            file: 文件名，按报告的写法（在当前目录之内时，写相对路径）。
            line: 注释所在的行号。
            status: ``"wrong"``（错）、``"right"``（对）、``"not checked"``（读懂了，但这一行
                没有运行、或者有不认识的名字等，没能检查）或 ``"not understood"``（看起来像形状，
                语法却读不懂：原因见 ``grammar.not_understood``）。
            said: 注释原样写出的形状，例如 ``"[batch_size, heads_num, seq_len, head_size]"``。
            stated: 注释的结果形状代入尺寸后的数值，例如 ``(2, 4, 3, 5)``（开头的 ``...``
                不计）；没能检查时为 ``None``。
            actual: 这一行算出的张量的形状，例如 ``(2, 3, 4, 5)``；没能检查时为 ``None``。
            corrected: 错误注释改正后的整条注释（``"# [batch_size, seq_len, heads_num,
                head_size]"``）；其余为 ``None``；错误注释没有改法时也是 ``None``，原因见
                ``not_fixed``。
            message: 报告在 ``file:line:`` 之后写的内容。
            comment: 文件里这条注释的原文。
            not_fixed: 错误注释为什么没有改法（没有名字代表某个尺寸，改正就得用这次运行的数字
                换掉注释里的名字；或者这一行几次运行得到的张量形状不同）；其余为 ``None``。
    """

    file: str
    line: int
    status: str
    said: str
    stated: tuple[int, ...] | None
    actual: tuple[int, ...] | None
    corrected: str | None
    message: str
    comment: str
    not_fixed: str | None = None

    def __str__(self) -> str:
        shown = f"{self.file}:{self.line}: {self.message}"
        if self.not_fixed:
            return shown + f"\n  not fixed: {self.not_fixed}"
        return shown + (f"\n  corrected: {self.corrected}" if self.corrected else "")


@dataclass
class Report:
    """The findings of one run of [`check`][mha.shapecheck.check], and how it ran.

    Args:
        target: what was checked, ``"model.py::MHA"``.
        findings: one per shape comment of the code that ran, in the order of the file.
        ran: how the target was built and called, ``"MHA(hidden_size=20, heads_num=4),
            forward(x=[2, 3, 20])"``.
        sizes: the sizes the checker named for the inputs it built (``batch_size``,
            ``seq_len``), empty when the inputs were given.
        error: what the constructor or the call raised, ``None`` when both returned.
        lookalikes: names that had the same size where a comment used them (a comment that
            swaps them passes), each group sorted; not two names of one dimension of one input
            the checker made (``B`` of ``B, T, C = x.shape`` and ``batch_size``).
        taken: the sizes of names nothing else knows, taken where first used, by name: the
            size and the line of the comment it was taken from.

    Attributes:
        wrong: the findings of the wrong comments.
        right: the findings of the comments checked and right.
        unchecked: the findings of the comments that could not be checked, each saying why.
        not_understood: the findings of the comments that look like a shape and are not read
            (``# x: (B, T, d)``, ``# b t d_ff``), each saying why: listed and counted, never
            skipped, never checked.
        exit_code: the command's exit status: 0 every comment checked is right, 1 a comment is
            wrong, 2 the constructor or the call raised, 3 nothing was checked.
        ok: whether ``exit_code`` is 0: no wrong comment, at least one right, and the run
            returned.

    中文:
        [`check`][mha.shapecheck.check] 运行一次的结果，以及它是怎样运行的。

        参数：
            target: 检查的对象，例如 ``"model.py::MHA"``。
            findings: 运行到的代码里的每条形状注释各一项，按文件里的顺序排列。
            ran: 目标是怎样构造和调用的，例如 ``"MHA(hidden_size=20, heads_num=4),
                forward(x=[2, 3, 20])"``。
            sizes: 检查器为它构造的输入取的尺寸名（``batch_size``、``seq_len``）；输入由调用者
                给出时为空。
            error: 构造或调用时抛出的异常；两者都正常返回时为 ``None``。
            lookalikes: 在用到它们的注释处大小相同的名字（把它们互换的注释也能通过），每组排好序；
                检查器构造的同一个输入的同一维的两个名字不算（``B, T, C = x.shape`` 的 ``B`` 和
                ``batch_size``）。
            taken: 别处都不认识、在第一次用到的地方取值的名字：按名字给出大小，以及取值的那条注释
                所在的行。

        属性：
            wrong: 错误注释的结果。
            right: 检查过且正确的注释的结果。
            unchecked: 没能检查的注释的结果，每项都说明原因。
            not_understood: 看起来像形状、却读不懂的注释的结果（``# x: (B, T, d)``、
                ``# b t d_ff``），每项都说明原因：一律列出并计数，不会跳过，也不算检查过。
            exit_code: 命令行的退出码：0 检查过的注释全部正确，1 有注释写错，2 构造或调用时抛出了
                异常，3 什么也没检查。
            ok: ``exit_code`` 是否为 0：没有错误注释，至少有一条正确，而且运行正常返回。
    """

    target: str
    findings: list[Finding]
    ran: str
    sizes: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    lookalikes: list[tuple[str, ...]] = field(default_factory=list)
    taken: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def wrong(self) -> list[Finding]:
        return [f for f in self.findings if f.status == WRONG]

    @property
    def right(self) -> list[Finding]:
        return [f for f in self.findings if f.status == RIGHT]

    @property
    def unchecked(self) -> list[Finding]:
        return [f for f in self.findings if f.status == UNCHECKED]

    @property
    def not_understood(self) -> list[Finding]:
        return [f for f in self.findings if f.status == UNREAD]

    @property
    def exit_code(self) -> int:
        if self.wrong:
            return 1
        if self.error is not None:
            return 2
        return 0 if self.right else 3

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def text(self, verbose: bool = False) -> str:
        """The report as the command prints it.

        Args:
            verbose: also list the comments that are right.

        Returns:
            The report: a line saying how the target ran, each wrong comment with its
            correction, the comments not checked, and a last line with the counts.

        中文:
            命令行打印的报告。

            参数：
                verbose: 同时列出正确的注释。

            返回：
                报告全文：一行说明目标怎样运行，每条错误注释及其改正，没能检查的注释，最后一行是
                各类的条数。
        """
        sizes = ", ".join(f"{n}={v}" for n, v in self.sizes.items())
        lines = [f"{self.target}: {self.ran}" + (f"; {sizes}" if sizes else "")]
        if self.taken:
            taken = ", ".join(f"{n}={v} (line {line})" for n, (v, line) in self.taken.items())
            lines.append(f"taken where first used: {taken}")
        shown = (WRONG, RIGHT) if verbose else (WRONG,)
        lines += [str(f) for f in self.findings if f.status in shown]
        lines += [str(f) for f in self.findings if f.status in (UNCHECKED, UNREAD)]
        for group in self.lookalikes:
            lines.append(
                f"note: {_listed(group)} had the same size where the comments use them, so a "
                "comment that swaps them passes: give them different sizes (--init, --input "
                "or --sizes)"
            )
        if self.error is not None:
            lines.append(self.error)
        counts = f"{len(self.wrong)} wrong, {len(self.right)} right, "
        counts += f"{len(self.unchecked)} not checked, {len(self.not_understood)} not understood"
        if not self.findings:
            counts = "nothing checked: no shape comment in the code that ran"
        elif not self.wrong and not self.right:
            counts += ": nothing checked"
        return "\n".join([*lines, counts])

    def __str__(self) -> str:
        return self.text()

    def fix(self) -> int:
        """Write each wrong comment's correction into its file; only the comments change. A
        wrong comment without a correction (``not_fixed`` says why) is left as it is.

        Returns:
            How many comments were corrected.

        中文:
            把每条错误注释改正后写回它所在的文件；只改注释。没有改法的错误注释（原因见
            ``not_fixed``）保持原样。

            返回：
                改正的注释条数。
        """
        by_file: dict[str, list[Finding]] = {}
        for finding in self.wrong:
            if finding.corrected is not None:
                by_file.setdefault(finding.file, []).append(finding)
        for file, findings in by_file.items():
            path = Path(file)
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            for finding in findings:
                line = lines[finding.line - 1]
                at = line.rindex(finding.comment)
                lines[finding.line - 1] = (
                    line[:at] + finding.corrected + line[at + len(finding.comment) :]
                )
            path.write_text("".join(lines), encoding="utf-8")
        return sum(map(len, by_file.values()))


def _kind(kind: str) -> str:
    """A type of value as a sentence says it: ``None``, ``unbound``, ``a float``."""
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return {"NoneType": "None", MISSING: "unbound"}.get(kind, f"{article} {kind}")


def _listed(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


# ---- Judging one comment ------------------------------------------------------------------------


def _number(value: int | Fraction) -> str:
    return str(value)


def _numbers(shape: grammar.Shape, values: tuple | None) -> str:
    if values is None:
        return "?"
    dims = tuple(_number(v) for v in values)
    return shape.written(((grammar.ELLIPSIS,) if shape.trailing else ()) + dims)


def _real(shape: grammar.Shape, real: tuple[int, ...] | str | None) -> str:
    if not isinstance(real, tuple):
        return "?"
    return shape.written(tuple(str(n) for n in real))


def _layout(spec: grammar.Spec, shown: dict[grammar.Shape, str], comment: str) -> str:
    """The spec's shapes replaced by ``shown``, what is between them as the comment writes it
    (``a x b -> c``, ``a @ b → c``)."""
    shapes = [s for group in spec.groups for s in group]
    between = [comment[a.end : b.start] for a, b in itertools.pairwise(shapes)]
    return "".join(shown[s] + gap for s, gap in zip(shapes, [*between, ""], strict=True))


def _pool(
    tool: dict[str, int], execution: Execution, given: dict[str, int | str]
) -> tuple[dict[str, Any], list[str]]:
    """The sizes by name where a comment's line ran, and the given sizes that did not resolve."""
    pool: dict[str, Any] = dict(tool) | execution.sizes
    unresolved = []
    for name, value in given.items():
        if isinstance(value, int):
            pool[name] = value
            continue
        size, _ = grammar.evaluate(value, pool)
        if size is None:
            unresolved.append(name)
        else:
            pool[name] = size
    return pool, unresolved


def _single_names(texts: list[str]) -> list[str]:
    return [t for t in texts if t.isidentifier()]


def _renamed(
    real: tuple[int, ...],
    shape: grammar.Shape,
    pool: dict[str, Any],
    own: list[str],
    vocabulary: list[str],
) -> str | int:
    """``real`` written as the comment would: in the names of its own comment, else of the
    file's comments, when each size has exactly one (or is a number the comment writes); a
    comment in numbers in numbers. Else the first size no name stands for: this run's numbers
    would replace the comment's names (``--fix`` leaves it). A leading ``...`` is kept when the
    tensor has the dimensions it leaves out."""
    count = len(shape.dims) - shape.trailing
    keep = shape.trailing and len(real) >= count
    dims = real[len(real) - count :] if keep else real
    prefix = (grammar.ELLIPSIS,) if keep else ()
    numbers = shape.written(prefix + tuple(str(n) for n in dims))
    if all(grammar.dimension(d) is None or d.isdigit() for d in own if d != grammar.ELLIPSIS):
        return numbers  # a comment in numbers is corrected in numbers
    tiers = [_single_names(own), own, _single_names(vocabulary), vocabulary]
    names = []
    for size in dims:
        for tier in tiers:
            matching = {t for t in tier if grammar.evaluate(t, pool)[0] == size}
            if len(matching) == 1:
                names.append(matching.pop())
                break
        else:
            if str(size) not in own:
                return size
            names.append(str(size))
    return shape.written(prefix + tuple(names))


@dataclass
class _Verdict:
    status: str
    message: str = ""
    said: str = ""
    stated: tuple | None = None
    actual: tuple[int, ...] | None = None
    corrected: str | None = None
    names: dict[str, set[str]] = field(default_factory=dict)  # a name -> those of its size here
    not_fixed: str | None = None  # why a wrong comment has no correction


def _unknown(names: list[str], unresolved: list[str]) -> str:
    """Why a comment with ``names`` unknown here is not checked."""
    listed = f"unknown name{'s' if len(names) > 1 else ''} {', '.join(names)}"
    given = [n for n in names if n in unresolved]
    if given:
        return f"{listed} (the --sizes of {', '.join(given)} names unknown sizes here)"
    return f"{listed} (give {'it' if len(names) == 1 else 'them'} with --sizes)"


def _before(a: Attached, execution: Execution) -> tuple[tuple[int, ...] | str, ...]:
    """The shapes of what the shapes before ``->`` are about, before the line ran: the operand
    (the name the line rebinds, else the one tensor it reads), or a matrix product's operands;
    a string says why one is not known (one string: why none is)."""
    if len(a.spec.operands) != 1:
        return execution.operands
    reads = execution.reads
    rebinds = [t for t in a.statement.targets if t in reads]
    if rebinds:
        return (reads[rebinds[0]],)
    if len(reads) == 1:
        return tuple(reads.values())
    return (f"the line reads {', '.join(reads) or 'no tensor'}, so the operand is not known",)


def _judge_once(
    a: Attached,
    execution: Execution,
    pool: dict[str, Any],
    unresolved: list[str],
    vocabulary: list[str],
) -> _Verdict:
    """The verdict on one comment for one time its line ran."""
    spec, text = a.spec, a.comment.text
    said = text[spec.start : spec.end]
    tensors = {t: v for t, v in execution.values.items() if isinstance(v, tuple)}
    if not tensors:
        what = " and ".join(_kind(k) for k in sorted(set(execution.values.values())))
        return _Verdict(UNCHECKED, f"not checked: {said}: the value is {what}, not a tensor", said)
    results = (spec.result, *spec.alternatives)
    stated = [grammar.stated(s.dims, pool) for s in results]
    missing = list(dict.fromkeys(n for _, unknown in stated for n in unknown))
    if missing:
        return _Verdict(UNCHECKED, f"not checked: {said}: {_unknown(missing, unresolved)}", said)
    # The comment's names, each with the file's other comment names of the same size here
    used = {n: pool[n] for s in spec.shapes() for n in grammar.names_in(s.dims) if n in pool}
    known = {v: pool[v] for v in _single_names(vocabulary) if v in pool}
    names = {n: {m for m, t in known.items() if t == size} | {n} for n, size in used.items()}
    own = [d for s in spec.shapes() for d in s.dims if d != grammar.ELLIPSIS]
    wrong_target = next(
        (
            t
            for t, real in tensors.items()
            if not any(
                grammar.agrees(s.dims, v, real) for s, (v, _) in zip(results, stated, strict=True)
            )
        ),
        None,
    )
    real = tensors[wrong_target or next(iter(tensors))]
    shown_stated = {s: "?" for s in spec.shapes()} | {
        spec.result: _numbers(spec.result, stated[0][0])
    }
    shown_real = {s: "?" for s in spec.shapes()} | {spec.result: _real(spec.result, real)}
    corrections: dict[grammar.Shape, str | int] = {}
    if wrong_target is not None:
        corrections[spec.result] = _renamed(real, spec.result, pool, own, vocabulary)
    for shape in spec.operands:  # what the comment says they are, checked or not
        shown_stated[shape] = _numbers(shape, grammar.stated(shape.dims, pool)[0])
    notes = []
    before = _before(a, execution)
    if len(before) == 1 and isinstance(before[0], str):
        notes.append(f"the shape before -> is not checked: {before[0]}")
        before = ()
    for shape, shape_real in zip(spec.operands, before, strict=False):
        values, unknown = grammar.stated(shape.dims, pool)
        shown_real[shape] = _real(shape, shape_real)
        if isinstance(shape_real, str):
            notes.append(f"the shape before -> is not checked: {shape_real}")
        elif unknown:
            notes.append(f"the shape before -> is not checked: {_unknown(unknown, unresolved)}")
        elif not grammar.agrees(shape.dims, values, shape_real):
            corrections[shape] = _renamed(shape_real, shape, pool, own, vocabulary)
    if spec.middle:
        notes.append("the shapes between the first and the last are not checked")
    stated_text = _layout(spec, shown_stated, text)
    said_is = "" if said == stated_text else f" = {stated_text}"  # a comment in numbers
    note = f" ({'; '.join(notes)})" if notes else ""
    if not corrections:
        message = f"right: {said}{said_is}{note}"
        return _Verdict(RIGHT, message, said, stated[0][0], real, names=names)
    corrected = text
    for shape in sorted(corrections, key=lambda s: -s.start):
        if isinstance(corrections[shape], int):
            break
        corrected = corrected[: shape.start] + corrections[shape] + corrected[shape.end :]
    if len(spec.groups) > 1:
        actual = f"the tensors are {_layout(spec, shown_real, text)}"
    else:
        which = "the tensor" if len(tensors) == 1 else f"the tensor {wrong_target}"
        actual = f"{which} is {shown_real[spec.result]}"
    message = f"comment says {said}{said_is}, {actual}{note}"
    nameless = next((c for c in corrections.values() if isinstance(c, int)), None)
    if nameless is not None:
        why = f"no name of the comments stands for {nameless} here, and this run's numbers would "
        why += "replace the comment's names"
        return _Verdict(WRONG, message, said, stated[0][0], real, None, names, why)
    return _Verdict(WRONG, message, said, stated[0][0], real, corrected, names)


def _judge(
    a: Attached,
    executions: list[Execution],
    tool: dict[str, int],
    given: dict[str, int | str],
    vocabulary: list[str],
    error: BaseException | None,
) -> tuple[_Verdict, list[dict[str, set[str]]]]:
    """The verdict on one comment over every time its line ran (the first wrong one, else
    right if any, else why not checked), and the sizes of its names where it was checked."""
    text = a.comment.text
    if not isinstance(a.spec, grammar.Spec):
        return _Verdict(UNREAD, f"not understood: {text!r}: {a.why}", text), []
    said = text[a.spec.start : a.spec.end]
    if a.statement is None:
        return _Verdict(UNCHECKED, f"not checked: {said}: {a.why}", said), []
    if not executions:
        why = "the line never ran" + (" (the call raised before it)" if error else "")
        return _Verdict(UNCHECKED, f"not checked: {said}: {why}", said), []
    verdicts = []
    for execution in executions:
        pool, unresolved = _pool(tool, execution, given)
        verdicts.append(_judge_once(a, execution, pool, unresolved, vocabulary))
    checked = [v.names for v in verdicts if v.status != UNCHECKED]
    shapes = list(dict.fromkeys(v.actual for v in verdicts if v.status != UNCHECKED))
    for status in (WRONG, RIGHT, UNCHECKED):
        chosen = next((v for v in verdicts if v.status == status), None)
        if chosen is not None and chosen.status == WRONG and len(shapes) > 1:
            chosen.corrected = None  # a correction for one pass would be wrong on another
            listed = ", ".join(_real(a.spec.result, shape) for shape in shapes)
            chosen.not_fixed = f"the line ran {len(verdicts)} times, its tensors {listed}"
        if chosen is not None:
            return chosen, checked
    raise AssertionError("no verdict")  # pragma: no cover


def _lookalikes(checked: list[dict[str, set[str]]]) -> list[tuple[str, ...]]:
    """Groups of the file's comment names that had one size where a comment using one of them
    was checked: a comment that names one for the other there passes."""
    groups: list[set[str]] = []
    for names in checked:
        for same in names.values():
            if len(same) < 2:
                continue
            joined = [g for g in groups if g & same]
            groups = [g for g in groups if not g & same]
            groups.append(set().union(same, *joined))
    return sorted(tuple(sorted(g)) for g in groups)


# ---- The check ---------------------------------------------------------------------------------


def _scope(source: Source, name: str) -> range:
    """The lines of the top-level class or function ``name`` (its last definition)."""
    nodes = [
        node
        for node in source.tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name == name
    ]
    node = nodes[-1]
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return range(first, node.end_lineno + 1)


def _filename(obj: Any) -> str:
    """The file name the code of ``obj`` (a class or function) was compiled with."""
    if isinstance(obj, type):
        for member in vars(obj).values():
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if code is not None:
                return code.co_filename
        return ""
    return obj.__code__.co_filename


def check(
    target: Any,
    init: dict[str, Any] | str | None = None,
    inputs: dict[str, Any] | str | None = None,
    sizes: dict[str, int | str] | str | None = None,
) -> Report:
    """Build ``target``, call it once under the tracer, and compare every shape comment of the
    code that ran with the tensor its line made.

    A class is built with ``init`` and a guess for each other argument without a default (sizes
    all different: 4 heads of size 5, a width of 20, ...), then called (its ``forward``) with
    ``inputs`` and, for each other argument without a default, a float32 tensor ``[batch_size,
    seq_len, width]`` of random values (``batch_size`` and ``seq_len`` chosen unlike every other
    size: 2 and 3 unless taken). A function is called with ``inputs``. On the CPU, without
    gradients; nothing is downloaded.

    Args:
        target: ``"path/to/file.py::Name"`` (a class or function of that file), or the class
            or function itself.
        init: the constructor's arguments, as a dict or as ``"hidden_size=24, heads_num=6"``.
        inputs: the call's arguments, as a dict or as ``"x=[5, 7, 24]"``: a list of whole
            numbers is the shape of a random float32 tensor, anything else is passed as it is.
        sizes: sizes by name, as a dict or as ``"batch_size=5, nh=n_head"``: a whole number,
            or a dimension of other names (resolved where each comment is checked).

    Returns:
        The report: one finding per shape comment, and how the target ran.

    Raises:
        TypeError: ``target``, ``init``, ``inputs`` or ``sizes`` is of another type.
        ValueError: ``target`` names no file, class or function; ``init``, ``inputs`` or
            ``sizes`` is malformed or names a parameter the signature does not have; or an
            argument without a default cannot be guessed.

    Examples:
        >>> import mha.annotated
        >>> from mha.shapecheck import check
        >>> report = check(mha.annotated.MHA)
        >>> report.ran
        'MHA(hidden_size=20, heads_num=4), forward(x=[2, 3, 20])'
        >>> len(report.right), report.wrong, report.exit_code
        (14, [], 0)
        >>> first = report.right[0]
        >>> first.said, first.stated, first.actual
        ('[batch_size, seq_len, hidden_size]', (2, 3, 20), (2, 3, 20))

    中文:
        构造 ``target``，在追踪器下调用一次，把运行到的代码里每条形状注释和这一行实际算出的
        张量对比。

        类按 ``init`` 构造，其余没有默认值的参数由检查器猜（尺寸互不相同：4 个头、每个头的维度
        5、宽度 20 等），然后调用它的 ``forward``：参数取 ``inputs``，其余没有默认值的参数各给
        一个随机的 float32 张量 ``[batch_size, seq_len, width]``（``batch_size`` 和 ``seq_len``
        与其他尺寸都不同：没被占用时取 2 和 3）。函数按 ``inputs`` 调用。全部在 CPU 上运行，
        不求梯度，不下载任何东西。

        参数：
            target: ``"path/to/file.py::Name"``（这个文件里的类或函数），或者类、函数本身。
            init: 构造参数，可以是字典，也可以写成 ``"hidden_size=24, heads_num=6"``。
            inputs: 调用参数，可以是字典，也可以写成 ``"x=[5, 7, 24]"``：整数列表表示随机
                float32 张量的形状，其他值原样传入。
            sizes: 按名字给出的尺寸，可以是字典，也可以写成 ``"batch_size=5, nh=n_head"``：
                整数，或者由其他名字组成的维度表达式（在检查每条注释的地方求值）。

        返回：
            报告：每条形状注释一项结果，以及目标是怎样运行的。

        异常：
            TypeError: ``target``、``init``、``inputs`` 或 ``sizes`` 的类型不对。
            ValueError: ``target`` 找不到对应的文件、类或函数；``init``、``inputs`` 或
                ``sizes`` 格式不对，或者写了签名里没有的参数；或者某个没有默认值的参数猜不出来。
    """
    return _check(target, init, inputs, sizes, ("target", "init", "inputs", "sizes"))


@dataclass
class Run:
    """One run of a target under the tracer, and what it takes to judge a text of its file's
    comments against it: ``report()`` reads the file as it is now (after ``--fix``, or a copy
    whose comments were changed: the lines must stay where they are)."""

    loaded: targets.Target
    observed: Observed
    tool: dict[str, int]
    given: dict[str, int | str]
    ran: str
    sizes: dict[str, int]
    error: str | None
    same: list[set[str]] = field(default_factory=list)  # names of one dimension of one input

    def taken(self, source: Source) -> dict[str, tuple[int, int]]:
        """The sizes of names nothing else knows, taken where first used: from the first line
        that ran (in the order they ran) whose comment's result has the name as its only
        unknown, a whole dimension of its own, every other dimension known and agreeing with
        the tensor: the name's size and that comment's line."""
        executions = sorted(
            (e.order, a, e)
            for a in source.attached
            if isinstance(a.spec, grammar.Spec) and a.statement is not None
            for e in self.observed.executions.get(a.statement.first_line, [])
        )  # fmt: skip
        taken: dict[str, tuple[int, int]] = {}
        for _, a, execution in executions:
            sizes = {n: size for n, (size, _) in taken.items()} | self.tool
            pool, _ = _pool(sizes, execution, self.given)
            dims = a.spec.result.dims[a.spec.result.trailing :]
            _, unknown = grammar.stated(dims, pool)
            tensors = {v for v in execution.values.values() if isinstance(v, tuple)}
            if a.spec.alternatives or len(unknown) != 1 or unknown[0] in self.given:
                continue
            if dims.count(unknown[0]) != 1 or len(tensors) != 1:
                continue
            (real,) = tensors
            offset = len(real) - len(dims)
            if offset < 0 or (offset and not a.spec.result.trailing):
                continue
            at = dims.index(unknown[0])
            others = [grammar.evaluate(d, pool)[0] for i, d in enumerate(dims) if i != at]
            if others == [n for i, n in enumerate(real[offset:]) if i != at]:
                taken[unknown[0]] = (real[offset + at], a.comment.line)
        return taken

    def report(self, text: str | None = None) -> Report:
        if text is None:
            text = self.loaded.path.read_text(encoding="utf-8")
        source = Source.read(text)
        scope = _scope(source, self.loaded.name)
        vocabulary = source.vocabulary()
        taken = self.taken(source)
        tool = {n: size for n, (size, _) in taken.items()} | self.tool
        where = {line: n for n, (_, line) in taken.items()}
        findings = []
        checked: list[dict[str, set[str]]] = []
        for a in source.attached:
            function = source.function_at(a.comment.line)
            if function is None:
                continue
            first = min([function.lineno] + [d.lineno for d in function.decorator_list])
            if a.comment.line not in scope and (function.name, first) not in self.observed.reached:
                continue
            line = a.statement.first_line if a.statement is not None else -1
            executions = self.observed.executions.get(line, [])
            verdict, names = _judge(
                a, executions, tool, self.given, vocabulary, self.observed.error
            )
            checked += names
            if a.comment.line in where and verdict.status == RIGHT:
                name = where[a.comment.line]
                verdict.message += f" ({name} = {taken[name][0]} taken from this line)"
            findings.append(
                Finding(
                    self.loaded.shown,
                    a.comment.line,
                    verdict.status,
                    verdict.said,
                    verdict.stated,
                    verdict.actual,
                    verdict.corrected,
                    verdict.message,
                    a.comment.text,
                    verdict.not_fixed,
                )
            )
        lookalikes = [g for g in _lookalikes(checked) if not any(set(g) <= c for c in self.same)]
        return Report(
            self.loaded.label, findings, self.ran, self.sizes, self.error, lookalikes, taken
        )


def _check(target: Any, init: Any, inputs: Any, sizes: Any, arguments: tuple) -> Report:
    """``check``, its errors naming the arguments as ``arguments`` says."""
    return run(target, init, inputs, sizes, arguments).report()


def run(
    target: Any,
    init: Any = None,
    inputs: Any = None,
    sizes: Any = None,
    arguments: tuple[str, str, str, str] = ("target", "init", "inputs", "sizes"),
) -> Run:
    """Build and call ``target`` under the tracer as ``check`` does; its errors name the
    arguments as ``arguments`` says (the command's ``--init`` ...)."""
    names = dict(zip(("target", "init", "inputs", "sizes"), arguments, strict=True))
    loaded = targets.load(target, names["target"])
    given_init = targets.parse_init(init, names["init"])
    given_inputs = targets.parse_inputs(inputs, names["inputs"])
    given_sizes = targets.parse_sizes(sizes, names["sizes"])
    source = Source.read(loaded.path.read_text(encoding="utf-8"))
    filename = _filename(loaded.obj)
    observer = Observer(source, code_objects(loaded.module, filename), filename)
    obj = loaded.obj
    tool: dict[str, int] = {}
    shown_sizes: dict[str, int] = {}
    with torch.no_grad():
        if isinstance(obj, type):
            init_arguments = targets.constructor_arguments(obj, given_init, names["init"])
            built = ", ".join(f"{n}={v!r}" for n, v in init_arguments.items())
            built = f"{obj.__name__}({built})"

            def build():
                torch.manual_seed(0)
                return obj(**init_arguments)

            model = observer.run(build)
            tool |= {n: v for n, v in init_arguments.items() if type(v) is int}
            if observer.observed.error is not None:
                error = f"building {built} raised {_raised(observer.observed.error)}"
                return Run(loaded, observer.observed, tool, given_sizes, built, {}, error)
            used = set(tool.values()) | {v for v in given_sizes.values() if type(v) is int}
            used |= {v for v in vars(model).values() if type(v) is int}
            batch, length = targets.batch_and_length(used, given_sizes)
            width = targets.width_of(init_arguments, model)
            shape = (batch, length, width) if width is not None else None
            function, owner = type(model).forward, f"{obj.__name__}.forward()"
            call_arguments = targets.call_inputs(
                function, given_inputs, shape, names["inputs"], owner, skip_self=True
            )
            callee, label = model, "forward"
        else:
            if given_init:
                raise ValueError(
                    f"{names['init']}: {loaded.name} is a function, it is not built; give its "
                    f"arguments with {names['inputs']}, got {init!r}"
                )
            built, function, owner = "", obj, f"{obj.__name__}()"
            call_arguments = targets.call_inputs(
                obj, given_inputs, None, names["inputs"], owner, skip_self=False
            )
            callee, label = obj, obj.__name__
            batch = length = None
        if any(n not in given_inputs for n in call_arguments):  # inputs the checker made
            shown_sizes = {"batch_size": batch, "seq_len": length}
            tool |= shown_sizes
        called = ", ".join(f"{n}={targets.shown(v)}" for n, v in call_arguments.items())
        called = f"{label}({called})"
        values = targets.materialised(call_arguments)
        positional = targets.positional_only(function, skip_self=isinstance(obj, type))
        args = [values.pop(n) for n in positional if n in values]
        observer.run(lambda: callee(*args, **values))
    ran = f"{built}, {called}" if built else called
    error = None
    if observer.observed.error is not None:
        error = f"the call raised {_raised(observer.observed.error)}"
    made = {n: v.shape for n, v in call_arguments.items() if isinstance(v, targets.TensorShape)}
    made = {n: shape for n, shape in made.items() if n not in given_inputs}
    width = next((n for n, v in init_arguments.items() if n in targets.WIDTH), None) if (
        isinstance(obj, type)
    ) else None  # fmt: skip
    same = _same_dimension(source, function, made, width)
    return Run(loaded, observer.observed, tool, given_sizes, ran, shown_sizes, error, same)


def _same_dimension(
    source: Source, function: Any, made: dict[str, tuple[int, ...]], width: str | None
) -> list[set[str]]:
    """The names that stand for one dimension of the inputs the checker made (``made``, by
    parameter): ``batch_size`` and ``seq_len`` for the first two, the constructor's ``width``
    argument for the last of three, and the locals the called ``function`` unpacks from them
    (``B, T, C = x.shape``). Two such names have one size by construction: no note about them
    can be acted on."""
    code = getattr(function, "__code__", None)
    node = source.functions.get((code.co_name, code.co_firstlineno)) if code else None
    locals_ = dimension_names(node) if node is not None else {}
    groups: dict[tuple[str, int], set[str]] = {}
    for parameter, shape in made.items():
        named = {0: "batch_size", 1: "seq_len"} | ({2: width} if width and len(shape) == 3 else {})
        for index, name in named.items():
            groups.setdefault((parameter, index), set()).add(name)
        for name, (of, index) in locals_.items():
            if of == parameter and -len(shape) <= index < len(shape):
                groups.setdefault((parameter, index % len(shape)), set()).add(name)
    classes: list[set[str]] = []
    for names in groups.values():
        joined = [c for c in classes if c & names]
        classes = [c for c in classes if not c & names] + [set().union(names, *joined)]
    return [c for c in classes if len(c) > 1]


def _raised(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
