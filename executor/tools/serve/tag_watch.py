"""The tags the live view shows (executor/tools/tags.py), kept current as the watcher's steps are.

Each refresh lists `tags/` once (a generation per tag file) and reads only the tag files that changed
or appeared; it answers which step ids gained or lost a tag, so their rows are re-sent to open pages.
What is held is one entry per tag (where it points now), not the tags' histories.
"""

from __future__ import annotations

from typing import Any

from executor.tools.tags import TagEntry, read_tag_files, tag_files


class TagWatch:
    def __init__(self) -> None:
        self.entries: dict[str, TagEntry] = {}  # tag file key -> where it points now
        self.generations: dict[str, str] = {}  # tag file key -> its generation when read

    def refresh(self, store: Any) -> set[str]:
        """One listing of tags/, reads of what changed; the step ids whose tags changed."""
        listed = tag_files(store)
        changed = [key for key, generation in listed.items() if self.generations.get(key) != generation]
        touched: set[str] = set()
        for key in [k for k in self.generations if k not in listed]:
            del self.generations[key]
            gone = self.entries.pop(key, None)
            if gone is not None:
                touched.add(gone.step_id)
        for key, entry in read_tag_files(store, changed).items():
            before = self.entries.pop(key, None)
            touched.update(e.step_id for e in (before, entry) if e is not None)
            self.generations[key] = listed[key]
            if entry is not None:
                self.entries[key] = entry
        return touched

    def of(self, step_id: str) -> list[str]:
        """The tags (name@version) pointing at `step_id` now, sorted."""
        return sorted(e.tag for e in self.entries.values() if e.step_id == step_id)

    def rows(self) -> list[TagEntry]:
        """Every tag, where it points now, by name."""
        return sorted(self.entries.values(), key=lambda e: e.tag)
