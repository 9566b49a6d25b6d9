"""MkDocs hook: nav entries for pages another change is still writing.

mkdocs.yml lists such pages under `extra: pending_pages:`. While one of them
is missing from docs/, its nav entry is left out of the build (and said so
at INFO level) instead of failing `mkdocs build --strict`; once the file
exists it is built like any other page. Any other missing page still fails.
"""

import logging
import os

log = logging.getLogger("mkdocs.hooks.pending_pages")


def _prune(items, missing):
    kept = []
    for item in items:
        if isinstance(item, dict):
            (title, value), = item.items()
            if isinstance(value, list):
                value = _prune(value, missing)
                if value:
                    kept.append({title: value})
                continue
            if value in missing:
                log.info("nav: %s (%s) is not written yet; left out of this build", title, value)
                continue
        elif item in missing:
            log.info("nav: %s is not written yet; left out of this build", item)
            continue
        kept.append(item)
    return kept


def on_config(config, **kwargs):
    pending = (config.get("extra") or {}).get("pending_pages") or []
    missing = {p for p in pending if not os.path.exists(os.path.join(config["docs_dir"], p))}
    if missing and config.get("nav"):
        config["nav"] = _prune(config["nav"], missing)
    return config
