"""The launcher's kubeconfig reader against ``yaml.safe_load`` (differential, on generated kubeconfigs).

``ranktable.launch.kubeconfig.parse_yaml`` stands in for PyYAML, which the
one-file launcher cannot carry. It must read what ``yaml.safe_dump`` and
kubectl write exactly as ``yaml.safe_load`` reads it, and refuse anything
else with a :class:`YamlError` that names the line; it must never return a
value ``safe_load`` would not.

kubectl's layout: ``tests/unit/data/kubectl-kubeconfig.yaml`` was written by
kubectl v1.32 (``kubectl config set users.uNN.token VALUE`` for each value
of ``kubectl-kubeconfig.values.json``; the ``<<`` and ``=`` tokens it writes
plain are left out: ``safe_load`` cannot read them, see
:func:`test_kubectl_plain_merge_key_is_refused_as_pyyaml_refuses_it`).
:func:`kubectl_dump` writes that layout (go-yaml v2's choices: literal blocks
for multi-line values, double quotes for words YAML 1.1 reads as another
type, a fold at a space in double-quoted values); a test checks that it
reproduces kubectl's file byte for byte, and the property tests then feed
it generated kubeconfigs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ranktable.launch.kubeconfig import ApiConfigError, YamlError, kubeconfig_config, parse_yaml

DATA = Path(__file__).parent / "data"
LINE = r"^line \d+: "


class KubectlDumper(yaml.SafeDumper):
    """PyYAML's safe dumper with go-yaml v2's style choices (what kubectl's ``config`` commands write)."""


def _kubectl_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style: str | None = None
    if "\n" in value:
        style = "|"  # the emitter falls back to double quotes where a block cannot hold the value, as go-yaml does
    elif dumper.resolve(yaml.ScalarNode, value, (True, False)) != "tag:yaml.org,2002:str":
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


KubectlDumper.add_representer(str, _kubectl_str)


def kubectl_dump(doc: Any, *, width: int = 80) -> str:
    """``doc`` as kubectl writes a kubeconfig (sorted keys, 2-space indent, sequences at their key's indent)."""
    text = yaml.dump(
        doc, Dumper=KubectlDumper, default_flow_style=False, allow_unicode=True, sort_keys=True, width=width, indent=2
    )
    # go-yaml folds a long double-quoted value at a space with a plain line break; PyYAML
    # escapes the break and the space (``\`` at the end of the line, ``\ `` on the next).
    # (go-yaml folds only at a single space: a space on either side stays escaped.)
    return re.sub(r"(?<=[^ ])\\\n( +)\\ (?=[^ ])", r"\n\1", text)


def agrees(text: str) -> Any:
    """The reader's value for ``text``, asserted equal to ``yaml.safe_load``'s."""
    expected = yaml.safe_load(text)
    assert parse_yaml(text) == expected, text
    return expected


#: Line breaks YAML reads but Python's ``str.split("\n")`` does not: ``safe_dump(allow_unicode=True)``
#: writes them raw inside quoted values (kubectl escapes them); the reader refuses them.
RAW_BREAKS = re.compile("[\x85\u2028\u2029]")


def agrees_or_refuses_raw_breaks(text: str) -> Any:
    """:func:`agrees`, except that a text with a raw U+0085, U+2028 or U+2029 is refused (and named): None."""
    if RAW_BREAKS.search(text):
        with pytest.raises(YamlError, match=LINE + "character U\\+(0085|2028|2029)"):
            parse_yaml(text)
        return None  # (safe_load does not read them back as written either: U+0085 comes back as a space)
    return agrees(text)


# -- what kubectl writes ---------------------------------------------------------------------------


def test_kubectl_writes_what_the_emulation_writes_and_the_reader_reads_it() -> None:
    text = (DATA / "kubectl-kubeconfig.yaml").read_text(encoding="utf-8")
    values = json.loads((DATA / "kubectl-kubeconfig.values.json").read_text(encoding="utf-8"))
    doc = agrees(text)
    assert {user["name"]: user["user"]["token"] for user in doc["users"]} == values
    assert kubectl_dump(doc) == text
    # the file holds each style this reader must read
    for sample in ("token: word0 word1", "      word12", "token: |-", "token: |+", "token: |2-", "token: '''quoted'''"):
        assert sample in text
    assert re.search(r'token: "line one[^"]*line\n      one', text)


def test_kubectl_plain_merge_key_is_refused_as_pyyaml_refuses_it() -> None:
    for word in ("<<", "="):  # kubectl writes these tokens plain; YAML 1.1 reads them as a merge key and a value key
        text = f"users:\n- name: u\n  user:\n    token: {word}\n"
        with pytest.raises(yaml.constructor.ConstructorError, match="could not determine a constructor"):
            yaml.safe_load(text)
        with pytest.raises(YamlError, match=LINE + "'" + re.escape(word) + "' is a number, date or merge key"):
            parse_yaml(text)


def test_a_folded_long_value_from_safe_dump_is_read(tmp_path: Path) -> None:
    # The reported failure: PyYAML folds a value with spaces past 80 columns onto a second line.
    token = " ".join(["bearer-part"] * 12)
    doc = {
        "apiVersion": "v1",
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    text = yaml.safe_dump(doc)
    assert f"token: {token}" not in text  # folded
    assert agrees(text) == doc
    (tmp_path / "config").write_text(text)
    assert kubeconfig_config(str(tmp_path / "config")).token == token


# -- generated kubeconfigs -------------------------------------------------------------------------

#: Words that change meaning or style when unquoted, and pieces of the characters writers escape.
TRICKY = [
    "yes", "No", "on", "OFF", "true", "False", "null", "~", "", "0", "-1", "+7", "012", "0x1f", "1_000", "1.5",
    ".inf", "1e3", "2026-01-31", "2026-01-31 12:00:00", "12:30", "<<", "=", "-", "- x", "? q", ": c", "a: b",
    "a #b", "#c", "'q'", '"d"', "&a", "*a", "!t", "%p", "@x", "`t", "{f}", "[f]", "a,b", "|", ">", " lead",
    "trail ", "\t", "\n", "\n\n", " \n", "\x07", "\x1b", "\x85", "\xa0", "\u2028", "é", "☃", "\U0001f600",
    "\\", "/", "---", "...",
]  # fmt: skip

words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
piece = st.sampled_from(TRICKY) | st.from_regex(r"[a-z0-9.:/=_-]{1,24}", fullmatch=True) | words
#: Values: short or long, spaced words (folded past the width) and tricky pieces.
value_text = st.lists(piece, max_size=10).flatmap(
    lambda parts: st.sampled_from([" ", "", "\n", "  "]).map(lambda sep: sep.join(parts))
)
scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | value_text
names = st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True)
keys = names | st.sampled_from(["certificate-authority-data", "client-key-data", "tokenFile", "a b", "x:y", "#k"])
extras = st.dictionaries(keys, scalars | st.lists(scalars, max_size=3) | st.builds(dict) | st.builds(list), max_size=4)


@st.composite
def kubeconfigs(draw: st.DrawFn) -> dict[str, Any]:
    """A kubeconfig's shape, generated values in every place a value goes."""

    def named(field: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"name": draw(names | value_text), field: {**body, **draw(extras)}}

    clusters = [
        named("cluster", {"server": draw(value_text), "certificate-authority-data": draw(value_text)})
        for _ in range(draw(st.integers(0, 2)))
    ]
    users = [named("user", {"token": draw(value_text)}) for _ in range(draw(st.integers(0, 2)))]
    contexts = [
        named("context", {"cluster": draw(names), "user": draw(names), "namespace": draw(scalars)})
        for _ in range(draw(st.integers(0, 2)))
    ]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
        "current-context": draw(value_text),
        "preferences": {},
    }
    doc.update(draw(st.dictionaries(names, scalars | st.lists(scalars, max_size=3), max_size=2)))
    return doc


@settings(max_examples=30)
@given(
    doc=kubeconfigs(),
    width=st.sampled_from([80, 40, 20]),
    indent=st.sampled_from([2, 4]),
    unicode=st.booleans(),
    start=st.booleans(),
)
def test_the_reader_reads_what_safe_dump_writes(
    doc: dict[str, Any], width: int, indent: int, unicode: bool, start: bool
) -> None:
    text = yaml.safe_dump(
        doc, width=width, indent=indent, allow_unicode=unicode, explicit_start=start, default_flow_style=False
    )
    assert agrees_or_refuses_raw_breaks(text) in (doc, None)
    assert RAW_BREAKS.search(text) or agrees(text) == doc


@settings(max_examples=30)
@given(doc=kubeconfigs(), width=st.sampled_from([80, 30]))
def test_the_reader_reads_what_kubectl_writes(doc: dict[str, Any], width: int) -> None:
    text = kubectl_dump(doc, width=width)
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:  # a plain `<<` or `=`, as kubectl writes them: both refuse
        with pytest.raises(YamlError, match=LINE):
            parse_yaml(text)
        return
    assert parse_yaml(text) == expected == doc, text


#: Edits that turn a writer's output into text a person might have written, or broken.
EDITS = [
    ("indent", lambda line: " " + line),
    ("dedent", lambda line: line[1:] if line.startswith(" ") else line),
    ("tab", lambda line: "\t" + line),
    ("comment", lambda line: line + " # note"),
    ("hash", lambda line: line + "#x"),
    ("colon", lambda line: line + ": x"),
    ("entry", lambda line: "- " + line),
    ("quote", lambda line: line.replace(": ", ": '", 1)),
    ("dquote", lambda line: line.replace(": ", ': "', 1)),
    ("block", lambda line: line.replace(": ", ": |\n  ", 1)),
    ("folded", lambda line: line.replace(": ", ": >-\n   ", 1)),
    ("flow", lambda line: line.replace(": ", ": {a: 1}", 1)),
    ("anchor", lambda line: line.replace(": ", ": &a ", 1)),
    ("doc", lambda line: "---\n" + line),
    ("end", lambda line: "...\n" + line),
    ("blank", lambda line: "\n" + line),
    ("space", lambda line: line + " "),
    ("float", lambda line: line + " 1.5" if line.rstrip().endswith(":") else line),
    ("question", lambda line: "? " + line),
    ("join", lambda line: line.rstrip("\n") + "\\"),
]


@settings(max_examples=60)
@given(
    doc=kubeconfigs(),
    kubectl=st.booleans(),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(EDITS)), min_size=1, max_size=3),
)
def test_the_reader_never_reads_a_value_safe_load_would_not(
    doc: dict[str, Any], kubectl: bool, edits: list[tuple[int, tuple[str, Any]]]
) -> None:
    lines = (kubectl_dump(doc) if kubectl else yaml.safe_dump(doc, width=40)).split("\n")
    for at, (_, edit) in edits:
        index = at % len(lines)
        lines[index] = edit(lines[index])
    text = "\n".join(lines)
    try:
        mine = parse_yaml(text)
    except YamlError as err:
        assert re.match(LINE, str(err)), err
        return
    assert mine == yaml.safe_load(text), text  # read: then exactly as PyYAML reads it


# -- what is refused, and how ----------------------------------------------------------------------

REFUSED = {
    "a: &anchor 1\n": "anchors",
    "a: *alias\n": "aliases",
    "a: !!str 1\n": "tags",
    "a: {b: 1}\n": "flow collections",
    "a: [1, 2]\n": "flow collections",
    "%YAML 1.1\n---\na: 1\n": "directives",
    "? a\n: 1\n": "`?` keys",
    "a: 1\na: 2\n": "duplicate key 'a'",
    "a:\n\tb: 1\n": "tab in indentation",
    "a: 1\n---\nb: 2\n": "more than one document",
    "a: 1.5\n": "'1.5' is a number, date or merge key",
    "a: 2026-01-31\n": "'2026-01-31' is a number, date or merge key",
    "1: a\n": "key '1' is not a string",
    "true: a\n": "key 'true' is not a string",
    "a: b: c\n": "`: ` in a plain value",
    "a: 'open\n": "does not end",
    'a: "x" y\n': "text after a quoted value",
    'a: "\\q"\n': "unknown escape",
    "a: |x\n  b\n": "block scalar's header",
    "a:\n  b: 1\n c: 2\n": "unexpected indentation",
    "a: x\x01\n": "character U+0001",
}


@pytest.mark.parametrize("text", REFUSED, ids=list(REFUSED.values()))
def test_what_the_reader_refuses_it_names(text: str) -> None:
    with pytest.raises(YamlError, match=LINE + ".*" + re.escape(REFUSED[text])):
        parse_yaml(text)


def test_a_refused_kubeconfig_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nusers:\n- name: u\n  user:\n    token: &t abc\n")
    with pytest.raises(ApiConfigError, match=rf"^kubeconfig {re.escape(str(path))}: line 5: "):
        kubeconfig_config(str(path))


BLOCKS = [
    "a: |\n  x\n  y\n",
    "a: |-\n  x\n\n",
    "a: |+\n  x\n\n\nb: 1\n",
    "a: >\n  folded\n  text\n\n  para\n   more\n  end\n",
    "a: >-\n  x\n",
    "a: |2\n    two extra\n  base\n",
    "- |\n  item\n- >\n  it\n  em\n",
    "a:\n- |1\n  x\n",
    "a: |\n\n  after blank\n",
    "a: |\n  # not a comment\n",
    "a: |\n  x\n  ",
    "a: |",
    "a: >\n  x\n\n",
    'a: "x\\\n  y"\n',
    "a: 'x\n\n  y'\n",
    "a: x\n  y\n\n  z\n",
    "a: x\n  # c\n",
    "- a\n  - b\n",
    "- - a\n  - b\n- c\n",
    "a:\n- b: 1\n  c: 2\n- d\n",
]


@pytest.mark.parametrize("text", BLOCKS)
def test_block_scalars_and_folds_read_as_pyyaml_reads_them(text: str) -> None:
    agrees(text)
