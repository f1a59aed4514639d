"""The project index an editor session keeps in memory (the language server's lint worker holds one).

A folder is indexed the first time a document in it is linted (its Python files, as a run over them would:
`amplint.index.build`); every open buffer's text then stands for its file, and is summarised again when it
changes; a closed buffer's file is read from disk again when an answer needs it. So a finding can depend on
another open, unsaved buffer, or on a saved file the editor never opened.
"""

from __future__ import annotations

import os

from amplint.index.build import expand, index_file, local_scan, read_text
from amplint.index.functions import FileIndex, index_text
from amplint.index.project import ModuleView, ProjectIndex


class Workspace:
    def __init__(self, max_size: int = 10 * 1024 * 1024) -> None:
        self.project = ProjectIndex(max_size)
        self.folders: set[str] = set()
        self.buffers: dict[str, str] = {}  # path -> the text its record was built from

    def update(self, buffers: dict[str, str]) -> None:
        """The open buffers now (path -> text): records of changed buffers rebuilt, closed ones back to disk."""
        buffers = {os.path.abspath(path): text for path, text in buffers.items()}
        for folder in {os.path.dirname(path) for path in buffers} - self.folders:
            self._index_folder(folder, buffers)
        for path in set(self.buffers) - set(buffers):  # closed: its file on disk is the module again
            del self.buffers[path]
            self.project.remove(path)
            self.project.know(path)
        for path, text in buffers.items():
            if self.buffers.get(path) != text:
                self.buffers[path] = text
                record = index_text(text)
                self.project.add(path, record if record is not None else FileIndex())

    def view(self, path: str) -> ModuleView:
        return self.project.view(os.path.abspath(path))

    def _index_folder(self, folder: str, buffers: dict[str, str]) -> None:
        self.folders.add(folder)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return
        others: list[str] = []
        for name in names:
            path = os.path.join(folder, name)
            if not name.endswith((".py", ".pyi")) or path in buffers or not os.path.isfile(path):
                continue
            source = read_text(path, self.project.max_size)
            record = index_file(source.text) if source is not None else None
            if record is not None:
                self.project.add(path, record)
            else:
                self.project.know(path)
                others.append(path)
        expand(self.project, others, local_scan(lambda path: read_text(path, self.project.max_size)))
