"""Phase 1, the project index: what every file of a run holds of AMP code, from the stdlib `ast` (cheap).

- `summary.Summary`: the screen's model of one file (does any enabled rule's structure occur here?).
- `functions.FileIndex`: per-function summaries of one file (what each function does: builds a GradScaler,
  backward, clip, unscale_, step, update, opens autocast regions, evaluates; whom it calls, in loops or regions)
  and its imports; serialisable, cached by content.
- `project.ProjectIndex`: every file's `FileIndex` with imports resolved to the project's own modules and calls
  resolved to functions across modules; `ModuleView` is the index seen from one module, what the libcst facts
  layer asks about calls that leave a function.
"""
