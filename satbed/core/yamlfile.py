"""Reading the YAML files users write (experiments, topologies, scenarios):
one loader, so every file gets the same one-line errors and the same bounds
(a file's size and alias expansions: a 'billion laughs' file otherwise takes
all memory)."""

from __future__ import annotations

import copy

import yaml

from satbed.core.errors import SatbedError

MAX_BYTES = 1 << 20
MAX_ALIASES = 200


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise SatbedError(f"more than {MAX_ALIASES} aliases (*name): refused")
        return super().compose_node(parent, index)


def load(path: str, what: str = "file"):
    """The document in a YAML file, or one SatbedError line beginning with its path."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except IsADirectoryError:
        raise SatbedError(f"{path}: a directory, not a {what}") from None
    except OSError as e:
        raise SatbedError(f"{path}: cannot read the {what}: {e.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise SatbedError(f"{path}: a {what} larger than {MAX_BYTES >> 20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SatbedError(f"{path}: a {what} must be UTF-8 text (bad byte at offset {e.start})") from None
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
