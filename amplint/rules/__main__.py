"""`python -m amplint.rules`: write amplint/rules/catalog.py from the rule modules (after adding a rule or changing
a rule's code, name, words, torch version, fix or severity); `--check` only says whether it is up to date."""

import sys

from amplint.rules import CATALOG_PATH, catalog_source


def main(argv: list[str]) -> int:
    text = catalog_source()
    current = CATALOG_PATH.read_text(encoding="utf-8") if CATALOG_PATH.exists() else None
    if "--check" in argv:
        print("up to date" if text == current else f"{CATALOG_PATH} is out of date: run `python -m amplint.rules`")
        return 0 if text == current else 1
    if text != current:
        CATALOG_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {CATALOG_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
