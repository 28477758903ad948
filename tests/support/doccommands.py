"""The commands the documentation gives, and what each script's install step installs.

Two questions a new user's fresh clone answers, asked here without running
anything heavy:

- **Is each documented command accepted?** :func:`documented_commands` reads
  README.md, CONTRIBUTING.md and ``docs/*.md`` (fenced blocks, with their
  ``\\`` continuations, and inline code spans) and returns every
  ``build/NAME.sh``, ``python -m tests...`` and ``ring-devcluster SUB``
  command with the options it names. :func:`help_argv` is the command that
  prints the help of the same mode (``build/bench.sh --vs-dns --help``,
  ``ring-devcluster up --help``); the tests run it and look for each
  documented option in what it prints.
- **Does the script install what it runs?** :func:`script_entries` names
  the Python a ``build/*.sh`` script runs (``python -m MODULE``, ``python
  FILE.py``, ``python -c CODE``), :func:`needed_imports` walks their imports
  through the repository (``TYPE_CHECKING`` blocks and ``try``/``except
  ImportError`` left out), and :func:`installed_by` reads the script's ``pip
  install`` lines: the project with its extras (``setup.cfg``), the dev-cluster
  tool (``build/devcluster``), named packages. :func:`missing_imports` is what
  the first needs and the second does not provide: a ``ModuleNotFoundError``
  waiting on a fresh clone.

Standard library plus ``packaging`` (pytest's own dependency).
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

ROOT = Path(__file__).resolve().parents[2]
#: Imports made only on a path that installs them itself -> why they are not required.
OPTIONAL_IMPORTS = {
    "matplotlib": "tests/bench/vsdns.py imports it only for --plot; build/bench.sh installs it when --plot is given",
}
#: Where first-party top-level packages live, and which install provides them.
_FIRST_PARTY: dict[str, tuple[Path, str]] = {
    "ringcontroller": (ROOT, "."),
    "agent": (ROOT, "."),
    "model": (ROOT, "."),
    "ranktable": (ROOT, "."),
    "ringdevcluster": (ROOT / "build" / "devcluster", "build/devcluster"),
    "tests": (ROOT, ""),  # the checkout itself: every script cd's to it
}

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
#: The start of a command we check, anywhere in a line or span.
_HEAD = re.compile(
    r"(?<![\w/.-])(build/[\w-]+\.sh|python3? -m (?:tests|ranktable)(?:\.\w+)+|ring-devcluster [a-z][\w-]*)"
)


@dataclass(frozen=True)
class Command:
    """One documented command: ``head`` (``build/bench.sh``, ``python -m tests.bench.vsdns``,
    ``ring-devcluster up``), its ``words`` after the head, and where it was found."""

    head: str
    words: tuple[str, ...]
    where: str

    @property
    def options(self) -> tuple[str, ...]:
        """The ``--long`` options it names, without values (``--controller-arg=--workers=4`` -> ``--controller-arg``)."""
        found = []
        for word in self.words:
            word = word.strip("[]()")
            if re.fullmatch(r"--[a-z][\w-]*(=.*)?", word):
                found.append(word.split("=", 1)[0])
        return tuple(dict.fromkeys(found))

    def __str__(self) -> str:
        return " ".join((self.head, *self.words))


def doc_pages(root: Path = ROOT) -> list[Path]:
    """The pages whose commands are checked: README.md, CONTRIBUTING.md and every ``docs/*.md``."""
    return [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]


def _words(text: str) -> tuple[str, ...]:
    text = re.split(r"(?:^|\s)#\s", text, maxsplit=1)[0]  # a shell comment
    text = re.split(r"\s(?:&&|\|\||;|\||&)(?:\s|$)", text + " ", maxsplit=1)[0]  # the next command
    try:
        words = shlex.split(text, posix=True)
    except ValueError:
        words = text.split()
    return tuple(w for w in words if w not in ("[", "]", "...", "\\"))


def commands_in(text: str, *, where: str) -> list[Command]:
    """Every command of :data:`_HEAD`'s kinds in Markdown ``text``: fenced lines (``\\`` joins lines) and code
    spans of prose (a span may run over a line break within its paragraph)."""
    found: list[Command] = []

    def add(piece: str, number: int) -> None:
        for match in _HEAD.finditer(piece):
            head = re.sub(r"^python3 ", "python ", match.group(1))
            found.append(Command(head, _words(piece[match.end() :]), f"{where}:{number}"))

    fenced = False
    pending, start = "", 0
    paragraph: list[str] = []
    para_start = 0

    def flush() -> None:
        text = "\n".join(paragraph)
        for m in _CODE_SPAN.finditer(text):
            add(m.group(2).replace("\n", " "), para_start + text[: m.start()].count("\n"))
        paragraph.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            flush()
            fenced, pending = not fenced, ""
            continue
        if fenced:
            if line.rstrip().endswith("\\"):
                start = start if pending else number
                pending += line.rstrip()[:-1] + " "
                continue
            first = start if pending else number
            add(re.split(r"(?:^|\s)#\s", pending + line, maxsplit=1)[0], first)  # not in comments
            pending, start = "", 0
        elif line.strip():
            if not paragraph:
                para_start = number
            paragraph.append(line)
        else:
            flush()
    flush()
    return found


def documented_commands(root: Path = ROOT) -> list[Command]:
    """The commands of :func:`doc_pages`, in page order."""
    out: list[Command] = []
    for page in doc_pages(root):
        out.extend(commands_in(page.read_text(encoding="utf-8"), where=str(page.relative_to(root))))
    return out


def dispatch_flags(script: Path) -> tuple[str, ...]:
    """The flags a ``build/*.sh`` script dispatches on itself (``[[ "$arg" == "--vs-dns" ]]``): each runs another program."""
    if not script.is_file():
        return ()
    text = script.read_text(encoding="utf-8")
    # An `if [[ "$arg" == "--x" ]]; then ... exec ...; fi` (or `== --x*` for a flag with a value); an `if` without
    # an exec (build/bench.sh installing matplotlib for --plot) picks nothing.
    blocks = re.findall(r'"\$arg" == "?(--[\w-]+)[^\n]*\]\]; then\n(.*?)\n\s*fi\b', text, re.S)
    return tuple(dict.fromkeys(flag for flag, body in blocks if re.search(r"^\s*exec\b", body, re.M)))


def mode_of(command: Command, root: Path = ROOT) -> tuple[str, ...]:
    """The words that pick what ``command`` runs: a script's dispatch flag (with its value, when the next word
    is one: ``--kinds job,sts``), or a subcommand (a leading word)."""
    if command.head.startswith("build/"):
        flags = dispatch_flags(root / command.head)
        words = command.words
        for i, word in enumerate(words):
            if word in flags or word.split("=", 1)[0] in flags:
                has_value = "=" not in word and i + 1 < len(words) and not words[i + 1].startswith("-")
                return words[i : i + 2] if has_value else (word,)
        return ()
    if command.words and re.fullmatch(r"[a-z][\w-]*", command.words[0]):
        return command.words[:1]
    return ()


def help_argv(command: Command, *, python: str = sys.executable, root: Path = ROOT) -> list[str]:
    """The argv that prints the help of ``command``'s mode (run from ``root``)."""
    mode = list(mode_of(command, root))
    if command.head.startswith("build/"):
        return ["bash", str(root / command.head), *mode, "--help"]
    if command.head.startswith("python -m "):
        return [python, "-m", command.head.split()[-1], *mode, "--help"]
    return [str(Path(python).parent / "ring-devcluster"), command.head.split()[1], "--help"]


# --- what a script runs, what it needs, what it installs ---------------------


@dataclass(frozen=True)
class Entry:
    """One Python program a script runs: a module (``-m``), a file, or ``-c`` code."""

    kind: str  # "module" | "file" | "code"
    target: str


def script_entries(script: Path) -> list[Entry]:
    """The Python ``script`` runs, read from its text (``python -m M``, ``python build/x.py``, ``python -c '...'``).

    ``python -m pytest ... tests/X`` adds every module under ``tests/X``.
    """
    text = script.read_text(encoding="utf-8")
    out: list[Entry] = []
    py = r"(?:python3?|\"\$python\"|\.venv/bin/python|\$python)"
    for m in re.finditer(py + r"\s+(?:-[A-Za-z]\s+)*-m\s+([\w.]+)(.*)", text):
        module, rest = m.group(1), m.group(2)
        out.append(Entry("module", module))
        if module == "pytest":  # the test files it is given (tests, tests/integration...)
            for given in re.findall(r"(?:^|\s)(tests(?:/[\w.-]+)*)/?(?=\s|$)", rest):
                path = ROOT / given
                files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
                out.extend(Entry("file", str(f.relative_to(ROOT))) for f in files)
    for m in re.finditer(py + r"\s+\"?(?:\$repo/)?(build/[\w/.-]+\.py)", text):
        out.append(Entry("file", m.group(1)))
    for m in re.finditer(py + r"\s+-c\s+'([^']*)'", text):
        line = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
        if "check_run" not in line:  # build/image.sh's check_run runs it inside the image, not here
            out.append(Entry("code", m.group(1)))
    return list(dict.fromkeys(out))


def _module_file(name: str) -> Path | None:
    top = name.split(".", 1)[0]
    if top not in _FIRST_PARTY:
        return None
    base = _FIRST_PARTY[top][0].joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _catches_import_error(handlers: list[ast.ExceptHandler]) -> bool:
    names: list[str] = []
    for h in handlers:
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type] if h.type else []
        names.extend(t.id for t in types if isinstance(t, ast.Name))
    return any(n in ("ImportError", "ModuleNotFoundError", "Exception") for n in names)


def _imports(tree: ast.AST, *, package: str) -> list[str]:
    """Absolute names imported in ``tree``, skipping ``if TYPE_CHECKING`` and ``try ... except ImportError``."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Try) and _catches_import_error(node.handlers):
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            out.append(base)
            out.extend(f"{base}.{alias.name}" for alias in node.names)  # submodules, where they are
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _package_of(path: Path) -> str:
    """The dotted package a first-party file belongs to ("" for a script such as build/demo.py)."""
    for top, (base, _project) in _FIRST_PARTY.items():
        if path.is_relative_to(base / top):
            return ".".join(path.parent.relative_to(base).parts)
    return ""


def needed_imports(entries: list[Entry]) -> dict[str, str]:
    """Top-level modules the entries import (through the repository's own modules), each with one importer.

    Standard-library modules are left out; first-party packages stay (``ringdevcluster`` needs its install).
    """
    needed: dict[str, str] = {}
    seen: set[Path] = set()
    sources: list[tuple[str, str, str]] = []  # (source, package, importer)
    files: list[Path] = []
    for e in entries:
        if e.kind == "module":
            if e.target.split(".")[0] not in sys.stdlib_module_names:
                needed.setdefault(e.target.split(".")[0], f"-m {e.target}")
            file = _module_file(e.target)
            if file is not None:
                files.append(file)
                if file.name == "__init__.py" and (file.parent / "__main__.py").is_file():
                    files.append(file.parent / "__main__.py")  # what -m runs for a package
        elif e.kind == "file":
            files.append(ROOT / e.target)
        else:
            sources.append((e.target, "", "-c code"))
    while files or sources:
        if files:
            path = files.pop()
            if path in seen or not path.is_file():
                continue
            seen.add(path)
            source, package, importer = path.read_text(encoding="utf-8"), _package_of(path), str(path.relative_to(ROOT))
        else:
            source, package, importer = sources.pop()
        for name in _imports(ast.parse(source), package=package):
            top = name.split(".", 1)[0]
            if not top or top in sys.stdlib_module_names or top == "__future__":
                continue
            needed.setdefault(top, importer)
            file = _module_file(name)
            if file is not None:
                files.append(file)
    return needed


@dataclass(frozen=True)
class Installed:
    """What a script's ``pip install`` lines give: local projects (``.``, ``build/devcluster``) and distribution names."""

    projects: frozenset[str]
    distributions: frozenset[str]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_by(script: Path) -> Installed:
    """Read ``script``'s ``pip install`` lines (every one counts, conditional or not)."""
    projects: set[str] = set()
    dists: set[str] = set()
    text = script.read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        match = re.search(r"-m pip install\s(.*)", line)
        if match is None or line.lstrip().startswith("#"):
            continue
        words = shlex.split(re.split(r"\s(?:[0-9]?>|\|\||&&|;)", match.group(1) + " ", maxsplit=1)[0])
        for word in words:
            if word.startswith("-"):
                continue
            match = re.fullmatch(r"(\.|build/devcluster)(\[([\w,${}-]+)\])?", word)
            if match:
                projects.add(match.group(1))
                extras = set()
                for part in filter(None, (match.group(3) or "").split(",")):
                    variable = re.fullmatch(r"\$\{?(\w+)\}?", part)
                    if variable is None:
                        extras.add(part)
                        continue
                    # extras="test,tensorflow": every value the script gives the variable counts
                    for value in re.findall(rf"(?:^|\s){variable.group(1)}=[\"']?([\w,-]*)", text, re.M):
                        extras.update(filter(None, value.split(",")))
                dists.update(_project_requirements(match.group(1), extras))
            elif re.fullmatch(r"[A-Za-z][\w.-]*(\[[\w,-]+\])?([<>=!~].*)?", word):
                dists.add(_canonical(Requirement(word).name))
    return Installed(frozenset(projects), frozenset(_closure(dists)))


def _project_requirements(project: str, extras: set[str]) -> set[str]:
    reqs: list[str] = []
    if project == ".":
        cfg = configparser.ConfigParser()
        cfg.read(ROOT / "setup.cfg")
        reqs += cfg.get("options", "install_requires", fallback="").split("\n")
        for extra in extras:
            reqs += cfg.get("options.extras_require", extra, fallback="").split("\n")
    else:
        meta = tomllib.loads((ROOT / project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        reqs += meta.get("dependencies", [])
        for extra in extras:
            reqs += meta.get("optional-dependencies", {}).get(extra, [])
    return {_canonical(Requirement(r).name) for r in (r.strip() for r in reqs) if r}


def _closure(dists: set[str]) -> set[str]:
    """``dists`` and what they require, as far as the running environment has them installed."""
    out, todo = set(), list(dists)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_canonical(req.name))
    return out


def missing_imports(script: Path) -> dict[str, str]:
    """Modules ``script``'s Python imports that its install step does not provide -> the file importing each."""
    installed = installed_by(script)
    providers = importlib.metadata.packages_distributions()
    missing: dict[str, str] = {}
    for top, importer in needed_imports(script_entries(script)).items():
        if top in _FIRST_PARTY:
            project = _FIRST_PARTY[top][1]
            if project and project not in installed.projects:
                missing[top] = importer
            continue
        dists = {_canonical(d) for d in providers.get(top, [])} or {_canonical(top)}
        if top in ("pip",) or top in OPTIONAL_IMPORTS or dists & installed.distributions:
            continue
        missing[top] = importer
    return missing
