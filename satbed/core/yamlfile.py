"""Reading the YAML files users write (experiments, topologies, scenarios):
one loader, so every file gets the same one-line errors and the same bounds:
regular files only (a FIFO would block forever), a file's size, alias
expansions (a 'billion laughs' file otherwise takes all memory), nesting
depth and no alias inside itself (either would end in a RecursionError in
whatever walks the document), and no key given twice in one mapping (YAML
would keep the last one silently)."""

from __future__ import annotations

import copy
import functools

import yaml

from satbed.core.errors import SatbedError
from satbed.core.files import read_regular

MAX_BYTES = 1 << 20
MAX_ALIASES = 200
MAX_DEPTH = 32              # the deepest real file (an inline topology's router port) is 6


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self.aliases = 0
        self.depth = 0
        self.open_anchors: set[str] = set()

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise SatbedError(f"more than {MAX_ALIASES} aliases (*name): refused")
            if event.anchor in self.open_anchors:
                raise SatbedError(f"line {event.start_mark.line + 1}: alias *{event.anchor} inside &{event.anchor} "
                                  f"itself (a document that contains itself): refused")
            return super().compose_node(parent, index)
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SatbedError(f"line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels: refused")
        if anchor:
            self.open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            self.open_anchors.discard(anchor)

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            # The resolved tag tells 1 from "1", as the constructed mapping would.
            ident = (key.tag, key.value)
            if ident in seen:
                raise SatbedError(f"line {key.start_mark.line + 1}: key {key.value!r} given twice in one mapping "
                                  f"(first on line {seen[ident]}): refused")
            seen[ident] = key.start_mark.line + 1
        return node


def load(path: str, what: str = "file"):
    """The document in a YAML file, or one SatbedError line beginning with its path.

    Each distinct text is parsed once and each caller gets its own copy:
    building a matrix's cells reads the same scenario, topology and profile
    files for every cell, and parsing them again took the Global Hawk
    matrix's 660 cells 20 s (a deepcopy of the parsed document is about 50
    times cheaper). Keyed on the text itself, not the file's modification
    time, which the kernel keeps only to a clock tick."""
    raw = read_regular(path, what, MAX_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SatbedError(f"{path}: a {what} must be UTF-8 text (bad byte at offset {e.start})") from None
    return copy.deepcopy(_parsed(path, what, text))


@functools.lru_cache(maxsize=64)
def _parsed(path: str, what: str, text: str):
    try:
        loader = _BoundedLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except SatbedError as e:
        raise SatbedError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise SatbedError(f"{path}:{where} not valid YAML ({what}): {getattr(e, 'problem', None) or e}") from None


def set_path(doc: dict, path: str, value, where: str = "") -> dict:
    """A copy of doc with the value at a dotted path (list items by index;
    missing mappings are made)."""
    out = copy.deepcopy(doc)
    node = out
    parts = path.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not (part.isascii() and part.isdigit()) or int(part) >= len(node):
                raise SatbedError(f"{where or path}: no item {part} in {'.'.join(parts[:i]) or 'the file'}")
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
        else:
            raise SatbedError(f"{where or path}: {'.'.join(parts[:i])} is not a mapping or a list")
    return out
