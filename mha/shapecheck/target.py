"""What to run: the target ``path::Name``, the constructor's arguments, the inputs, and the sizes
named on the command line, each checked where it arrives with an error that names the argument,
what it expects and what it got.

Sizes are chosen all different, so that a comment that swaps two axes cannot pass: 4 heads of
size 5 and a width of 20 (the site's), 2 key/value heads; a batch and a sequence length not used
by anything else (2 and 3 unless taken); other sizes the constructor asks for, 6 and up.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import itertools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from mha.shapecheck.grammar import dimension

# Constructor parameters by the role their name says, with the size each gets unless given.
HEADS = {
    "heads_num", "num_heads", "n_head", "n_heads", "nhead", "nheads", "heads", "head_num",
    "num_attention_heads", "h",
}  # fmt: skip
WIDTH = {
    "hidden_size", "d_model", "n_embd", "n_embed", "embed_dim", "embedding_dim", "dim",
    "hidden_dim", "model_dim", "d_embed", "emb_dim", "embed_size", "width", "d",
}  # fmt: skip
HEAD = {"head_size", "head_dim", "d_k", "d_head", "dim_head", "head_dims"}
KV_HEADS = {"kv_heads", "num_kv_heads", "n_kv_heads", "n_kv_head", "num_key_value_heads"}
RATES = {"dropout", "p", "dropout_p", "dropout_prob", "attn_pdrop", "resid_pdrop", "attn_dropout"}
HEADS_SIZE, HEAD_SIZE, KV_HEADS_SIZE = 4, 5, 2
BATCH_SEQ = (2, 3, 5, 6, 7, 9, 11, 13)  # the batch and the sequence length: the first two unused
OTHER_SIZES = (6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
SIZE_ENDINGS = ("_size", "_len", "_length", "_dim", "_dims", "_num", "_heads", "_rank")


@dataclass(frozen=True)
class Target:
    """A class or function of a file: ``shown`` is the file as the report names it."""

    path: Path
    shown: str
    name: str
    obj: Any
    module: ModuleType

    @property
    def label(self) -> str:
        return f"{self.shown}::{self.name}"


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


_IMPORTED: dict[Path, tuple[str, ModuleType]] = {}  # the files imported here, and their code
_COUNT = itertools.count()


def _module_of(path: Path) -> ModuleType:
    """The module of ``path``: the one imported from it elsewhere (``mha.annotated``, a module a
    test imported), the one imported here before if its code is the same (its comments may
    differ: ``--fix`` checks again), or the file imported now (its folder first on ``sys.path``
    meanwhile, so that it imports its neighbours)."""
    resolved = path.resolve()
    code = ast.dump(ast.parse(resolved.read_text(encoding="utf-8")))
    if resolved in _IMPORTED and _IMPORTED[resolved][0] == code:
        return _IMPORTED[resolved][1]
    ours = {id(module) for _, module in _IMPORTED.values()}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and id(module) not in ours and Path(file).resolve() == resolved:
            return module
    name = f"mha_shapecheck_{next(_COUNT)}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass with string annotations looks its module up there
    sys.path.insert(0, str(resolved.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path.remove(str(resolved.parent))
    _IMPORTED[resolved] = (code, module)
    return module


def load(target: object, argument: str = "target") -> Target:
    """The class or function ``target`` names: ``"path/to/file.py::Name"``, or the object."""
    if inspect.isclass(target) or inspect.isfunction(target):
        file = inspect.getsourcefile(target)
        if file is None:
            raise ValueError(f"{argument} must be defined in a file, got {target!r}")
        path = Path(file)
        return Target(path, _shown(path), target.__name__, target, sys.modules[target.__module__])
    if not isinstance(target, str):
        raise TypeError(
            f"{argument} must be 'path/to/file.py::Name' or a class or function, "
            f"got {type(target).__name__}"
        )
    file, separator, name = target.rpartition("::")
    if not separator or not file or not name.isidentifier():
        raise ValueError(
            f"{argument} must be PATH::NAME, such as model.py::MHA or model.py::attention, "
            f"got {target!r}"
        )
    path = Path(file)
    if not path.is_file():
        raise ValueError(f"{argument}: no file {file} (from {target!r})")
    module = _module_of(path)
    obj = getattr(module, name, None)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        defined = sorted(
            n
            for n, o in vars(module).items()
            if (inspect.isclass(o) or inspect.isfunction(o))
            and getattr(o, "__module__", None) == module.__name__
        )
        raise ValueError(
            f"{argument}: {file} has no class or function {name}; it defines "
            f"{', '.join(defined) or 'none'}"
        )
    return Target(path, file, name, obj, module)


# ---- The three arguments: NAME=VALUE pairs -----------------------------------------------------


def _pairs(text: str, argument: str, example: str) -> dict[str, ast.expr]:
    """``"a=1, b=[2, 3]"`` as names and the expressions after their ``=``."""
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        call = None
    if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
        raise ValueError(
            f"{argument} must be NAME=VALUE pairs separated by commas, such as {example!r}, "
            f"got {text!r}"
        )
    return {k.arg: k.value for k in call.keywords}


def _as_dict(value: object, argument: str, example: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str) or not k.isidentifier()]
        if bad:
            raise ValueError(f"{argument} must have names as keys, such as {example!r}, got {bad}")
        return dict(value)
    if isinstance(value, str):
        return _pairs(value, argument, example)
    raise TypeError(
        f"{argument} must be a dict or a string such as {example!r}, got {type(value).__name__}"
    )


def _literal(node: ast.expr, argument: str, name: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(
            f"{argument}: {name} must be a Python literal (a number, a list, None, True ...), "
            f"got {ast.unparse(node)!r}"
        ) from None


def parse_init(value: object, argument: str = "init") -> dict[str, Any]:
    """The constructor's arguments: ``"hidden_size=24, heads_num=6"`` or a dict."""
    pairs = _as_dict(value, argument, "hidden_size=24, heads_num=6")
    return {
        name: _literal(v, argument, name) if isinstance(v, ast.expr) else v
        for name, v in pairs.items()
    }


@dataclass(frozen=True)
class TensorShape:
    """An input given by its shape: a float32 tensor of random values is built for it."""

    shape: tuple[int, ...]

    def __str__(self) -> str:
        return str(list(self.shape))


def _shape(value: object) -> tuple[int, ...] | None:
    if isinstance(value, list | tuple) and all(
        type(n) is int and n >= 0 for n in value
    ):  # fmt: skip
        return tuple(value)
    return None


def parse_inputs(value: object, argument: str = "inputs") -> dict[str, Any]:
    """The inputs: ``"x=[5, 7, 24]"`` (a list of whole numbers is a tensor's shape; any other
    literal is passed as it is) or a dict (of shapes, tensors or values)."""
    pairs = _as_dict(value, argument, "x=[5, 7, 24]")
    found: dict[str, Any] = {}
    for name, v in pairs.items():
        literal = _literal(v, argument, name) if isinstance(v, ast.expr) else v
        if isinstance(literal, list | tuple):
            shape = _shape(literal)
            if shape is None:
                raise ValueError(
                    f"{argument}: the shape of {name} must be a list of whole numbers such as "
                    f"[5, 7, 24], got {literal!r}"
                )
            found[name] = TensorShape(shape)
        else:
            found[name] = literal
    return found


def parse_sizes(value: object, argument: str = "sizes") -> dict[str, int | str]:
    """Sizes by name: ``"batch_size=5, nh=n_head"``: a whole number, or a dimension of other
    names (resolved where each comment is checked)."""
    pairs = _as_dict(value, argument, "batch_size=5, nh=n_head")
    found: dict[str, int | str] = {}
    for name, v in pairs.items():
        text = ast.unparse(v) if isinstance(v, ast.expr) else v
        if type(text) is int and text >= 0:
            found[name] = text
        elif isinstance(text, str) and dimension(text) is not None:
            tree = dimension(text)
            is_number = isinstance(tree, ast.Constant)
            found[name] = tree.value if is_number else text
        else:
            raise ValueError(
                f"{argument}: {name} must be a whole number or a dimension of other names "
                f"(such as n_head or C // n_head), got {text!r}"
            )
    return found


# ---- Building the call --------------------------------------------------------------------------


def _parameters(function: Callable, skip_self: bool) -> list[inspect.Parameter]:
    parameters = list(inspect.signature(function).parameters.values())
    return parameters[1:] if skip_self and parameters else parameters


def _accepts_any(parameters: list[inspect.Parameter]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _named(parameters: list[inspect.Parameter]) -> list[inspect.Parameter]:
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p for p in parameters if p.kind not in variadic]


def _unknown_names(
    given: Mapping[str, Any], parameters: list[inspect.Parameter], argument: str, owner: str
) -> None:
    if _accepts_any(parameters):
        return
    names = [p.name for p in _named(parameters)]
    unknown = [n for n in given if n not in names]
    if unknown:
        raise ValueError(
            f"{argument}: {owner} has no parameter {', '.join(unknown)}; its parameters are "
            f"{', '.join(names) or 'none'}"
        )


def _size_like(parameter: inspect.Parameter) -> bool:
    name = parameter.name.lower()
    return (
        parameter.annotation in (int, "int")
        or name.endswith(SIZE_ENDINGS)
        or name.startswith(("n_", "num_"))
        or name in {"block_size", "max_len", "context_length", "max_seq_len", "max_position"}
    )


def constructor_arguments(cls: type, given: Mapping[str, Any], argument: str) -> dict[str, Any]:
    """The keyword arguments to build ``cls`` with: those ``given``, and a guess for each other
    parameter without a default (sizes all different; a rate 0.0; a flag False)."""
    parameters = _parameters(cls.__init__, skip_self=True)
    _unknown_names(given, parameters, argument, f"{cls.__name__}()")
    required = [p for p in _named(parameters) if p.default is inspect.Parameter.empty]
    chosen = dict(given)
    names = {p.name for p in required} - set(given)
    heads = next((given[n] for n in HEADS if n in given), None)
    width = next((given[n] for n in WIDTH if n in given), None)
    head = next((given[n] for n in HEAD if n in given), None)
    if heads is None:
        heads = HEADS_SIZE
        if isinstance(width, int):  # a divisor of the given width, other than the head size
            divisors = (d for d in (4, 3, 6, 5, 2, 8, 7) if width % d == 0 and width // d != d)
            heads = next(divisors, 1)
    if head is None:
        head = width // heads if isinstance(width, int) and isinstance(heads, int) else HEAD_SIZE
    if width is None and isinstance(heads, int) and isinstance(head, int):
        width = heads * head
    used = {v for v in chosen.values() if type(v) is int} | {heads, head, width}
    others = (n for n in OTHER_SIZES if n not in used)
    for parameter in required:
        name = parameter.name
        if name not in names:
            continue
        if name in HEADS:
            chosen[name] = heads
        elif name in WIDTH:
            chosen[name] = width
        elif name in HEAD:
            chosen[name] = head
        elif name in KV_HEADS:
            chosen[name] = KV_HEADS_SIZE if heads % KV_HEADS_SIZE == 0 else 1
        elif name.lower() in RATES or parameter.annotation in (float, "float"):
            chosen[name] = 0.0
        elif parameter.annotation in (bool, "bool"):
            chosen[name] = False
        elif _size_like(parameter):
            chosen[name] = next(others)
        else:
            raise ValueError(
                f"{argument}: cannot guess {name} of {cls.__name__}(); give it, such as "
                f'{argument} "{name}=..." (a literal: a number, a string, a list)'
            )
    order = [p.name for p in parameters]
    return dict(sorted(chosen.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 0))


def batch_and_length(used: set[int], given: Mapping[str, Any]) -> tuple[int, int]:
    """The batch size and the sequence length of the inputs the checker builds: those ``given``
    (as ``batch_size`` and ``seq_len``), else different from each other and from ``used``."""
    free = (n for n in itertools.chain(BATCH_SEQ, itertools.count(17)) if n not in used)
    batch = given.get("batch_size")
    batch = batch if type(batch) is int else next(free)
    length = given.get("seq_len")
    length = length if type(length) is int else next(n for n in free if n != batch)
    return batch, length


def width_of(init: Mapping[str, Any], model: object) -> int | None:
    """The width of an input: the constructor's width argument, else the first ``nn.Linear``'s
    input features."""
    width = next((v for n, v in init.items() if n in WIDTH and type(v) is int), None)
    if width is None and isinstance(model, torch.nn.Module):
        linear = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
        width = linear.in_features if linear is not None else None
    return width


def call_inputs(
    function: Callable,
    given: Mapping[str, Any],
    shape: tuple[int, ...] | None,
    argument: str,
    owner: str,
    skip_self: bool,
) -> dict[str, Any]:
    """The arguments of the call: those ``given``, and for each other parameter without a
    default a tensor of ``shape`` (``None``: the error says to give it)."""
    parameters = _parameters(function, skip_self)
    _unknown_names(given, parameters, argument, owner)
    found = dict(given)
    for p in _named(parameters):
        if p.name in found or p.default is not inspect.Parameter.empty:
            continue
        if shape is None:
            raise ValueError(
                f"{argument}: cannot guess the input {p.name} of {owner}; give its shape, "
                f'such as {argument} "{p.name}=[2, 3, 20]"'
            )
        found[p.name] = TensorShape(shape)
    return found


def materialised(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs`` with each shape made a float32 tensor of random values (seeded)."""
    torch.manual_seed(0)
    return {
        n: torch.randn(v.shape, dtype=torch.float32) if isinstance(v, TensorShape) else v
        for n, v in inputs.items()
    }


def positional_only(function: Callable, skip_self: bool) -> list[str]:
    """The parameters of ``function`` that only a position can give."""
    return [
        p.name
        for p in _parameters(function, skip_self)
        if p.kind is inspect.Parameter.POSITIONAL_ONLY
    ]


def shown(value: object) -> str:
    """An argument as the report shows it: a tensor by its shape."""
    if isinstance(value, torch.Tensor):
        return str(list(value.shape))
    return str(value) if isinstance(value, TensorShape) else repr(value)
