"""Split C++ sources into declarations, and identifiers into search terms.

A chunk is one top-level declaration inside any namespaces: a struct, class or union
(with its body), a function or function template (with its body), an alias (`using X
= ...`) or a `#define`. Template heads and the comment block just above belong to the
declaration. The scanner counts braces outside comments, strings and character
literals; namespaces, `extern "C"` blocks and preprocessor conditionals are entered,
not chunked.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

MAX_LINES = 400  # longer declarations keep their first lines (the head is what a search matches)


@dataclass
class Chunk:
    path: str  # relative to the source root
    line: int  # 1-based first line (the template head or comment included)
    end: int
    kind: str  # struct | class | union | function | alias | macro
    symbol: str
    text: str


_RECORD = re.compile(r"^\s*(?:template\s*<.*>\s*)?(struct|class|union)\s+(?:alignas\([^)]*\)\s*)?"
                     r"(?:\[\[[^\]]*\]\]\s*)?(?:CUTE_\w+\s+|CUTLASS_\w+\s+)*(\w+)")
_ALIAS = re.compile(r"^\s*(?:template\s*<.*>\s*)?using\s+(\w+)\s*=")
_MACRO = re.compile(r"^\s*#\s*define\s+(\w+)")
_FUNCTION = re.compile(r"(~?\w+|operator\s*[^\s(]+)\s*\($")
_NAMESPACE = re.compile(r"^\s*(?:inline\s+)?namespace\b[\w:\s]*\{?\s*$|^\s*extern\s+\"C\"\s*\{?\s*$")
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "static_assert", "alignas",
                  "CUTE_STATIC_ASSERT", "CUTE_STATIC_ASSERT_V", "defined"}


def _strip(line: str, in_comment: bool) -> tuple[str, bool]:
    """The line without comments, strings and character literals; whether a block comment is still open."""
    if not in_comment and "/" not in line and '"' not in line and "'" not in line:
        return line, False  # most lines: nothing to strip
    out, i = [], 0
    while i < len(line):
        if in_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            in_comment, i = False, end + 2
            continue
        two = line[i:i + 2]
        if two == "//":
            break
        if two == "/*":
            in_comment, i = True, i + 2
            continue
        if line[i] in "\"'":
            quote, i = line[i], i + 1
            while i < len(line) and line[i] != quote:
                i += 2 if line[i] == "\\" else 1
            i += 1
            out.append(" ")
            continue
        out.append(line[i])
        i += 1
    return "".join(out), in_comment


def _without_template_heads(head: str) -> str:
    """`template <class T, __CUTE_REQUIRES(...)> auto f(...)` -> `auto f(...)` (nested <> and () balanced)."""
    while (match := re.match(r"\s*template\s*<", head)) is not None:
        angle, paren, i = 1, 0, match.end()
        while i < len(head) and angle:
            char = head[i]
            paren += (char == "(") - (char == ")")
            if not paren:
                angle += (char == "<") - (char == ">")
            i += 1
        head = head[i:]
    return head


def _declaration(head: str) -> tuple[str, str] | None:
    """(kind, symbol) of a declaration whose text (code only, joined) is `head`, up to its `{` or `;`."""
    head = " ".join(head.split())
    if not head.lstrip().startswith("#"):
        head = _without_template_heads(head)
    if match := _MACRO.match(head):
        return "macro", match.group(1)
    if match := _ALIAS.match(head):
        return "alias", match.group(1)
    if match := _RECORD.match(head):
        return match.group(1), match.group(2)
    before_args = head.split("(")[0] if "(" in head else ""
    if before_args:
        name = re.search(r"(operator\s*\S+|~?\w+)\s*$", before_args.rstrip())
        if name and name.group(1) not in _NOT_FUNCTIONS and not before_args.rstrip().endswith("="):
            return "function", re.sub(r"\s+", "", name.group(1))
    return None


def chunk_source(path: str, text: str) -> list[Chunk]:
    lines = text.splitlines()
    chunks: list[Chunk] = []
    depth, scope_depth, in_comment = 0, 0, False
    start, head = None, []  # the declaration being read: its first line and its code so far
    opened_at = None  # depth at which the current declaration's body opened
    comment_from = None  # first line of the comment block just above
    directive = False  # the previous line was a preprocessor line continued by a backslash
    for number, raw in enumerate(lines, start=1):
        code, in_comment_next = _strip(raw, in_comment)
        stripped = raw.strip()
        if directive or (opened_at is None and start is None and code.lstrip().startswith("#")):
            # a directive, and the lines a trailing backslash continues it onto (`#if defined(A) ||\`): never code
            continued = directive
            directive = raw.rstrip().endswith("\\")
            if continued:
                if chunks and chunks[-1].kind == "macro" and chunks[-1].end == number - 1:
                    chunks[-1].end, chunks[-1].text = number, chunks[-1].text + "\n" + raw
                in_comment = in_comment_next
                continue
        if opened_at is None and start is None:
            if not code.strip():  # comment or blank line: a comment block may lead the next declaration
                if stripped.startswith(("//", "/*", "*")) or in_comment:
                    comment_from = comment_from or number
                elif not stripped:
                    comment_from = None
                in_comment = in_comment_next
                continue
            if code.lstrip().startswith("#"):
                if match := _MACRO.match(code):
                    chunks.append(Chunk(path, comment_from or number, number, "macro", match.group(1),
                                        "\n".join(lines[(comment_from or number) - 1:number])))
                comment_from, in_comment = None, in_comment_next
                continue
            if _NAMESPACE.match(code) or (code.strip() == "{" and depth == scope_depth):
                depth += code.count("{") - code.count("}")
                scope_depth = depth
                comment_from, in_comment = None, in_comment_next
                continue
            if code.strip().startswith("}") and depth <= scope_depth:  # a namespace closes
                depth += code.count("{") - code.count("}")
                scope_depth = depth
                comment_from, in_comment = None, in_comment_next
                continue
            start, head = comment_from or number, []
        comment_from = None
        in_comment = in_comment_next
        if opened_at is None:
            head.append(code)
            before = depth
            depth += code.count("{") - code.count("}")
            if "{" in code and depth > before:
                opened_at = before  # a body opened: it ends when the depth comes back
            elif code.rstrip().endswith(";") and depth == before:
                _close(chunks, path, lines, start, number, head)
                start, head = None, []
            continue
        depth += code.count("{") - code.count("}")
        if depth <= opened_at:
            depth = opened_at
            _close(chunks, path, lines, start, number, head)
            start, head, opened_at = None, [], None
    return chunks


def _close(chunks: list[Chunk], path: str, lines: list[str], start: int, end: int, head: list[str]) -> None:
    joined = " ".join(head)
    cut = min((i for i in (joined.find("{"), joined.find(";")) if i >= 0), default=len(joined))
    found = _declaration(joined[:cut])
    if found is None:
        return
    kind, symbol = found
    body = lines[start - 1:min(end, start - 1 + MAX_LINES)]
    chunks.append(Chunk(path, start, end, kind, symbol, "\n".join(body)))


# -- search terms ---------------------------------------------------------------------------------
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\d|\b)|[A-Z]?[a-z]+|[A-Z]+|\d+")
_LETTERS_DIGITS = re.compile(r"[A-Za-z]+\d+")


def terms(text: str) -> list[str]:
    """Search terms: each identifier lower-cased, and its camelCase/snake_case/digit parts
    (`SM90_TMA_LOAD` -> sm90_tma_load, sm90, sm, 90, tma, load; `make_tiled_copy` -> ..., tiled, copy)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        out += _word_terms(word)
    return out


@functools.lru_cache(maxsize=1 << 16)
def _word_terms(word: str) -> tuple[str, ...]:
    """One identifier's terms (`terms`); sources repeat their identifiers, so each is split once."""
    lower = word.lower()
    out = [lower]
    pieces = [p for p in word.split("_") if p]
    if len(pieces) > 1:
        out += [p.lower() for p in pieces]
    for piece in pieces:
        parts = _PARTS.findall(piece)
        if len(parts) > 1:
            out += [p.lower() for p in parts]
        if len(parts) == 1 and _LETTERS_DIGITS.fullmatch(piece):
            out.append(piece.lower())
    return tuple(t for t in out if len(t) > 1 or t.isdigit())
