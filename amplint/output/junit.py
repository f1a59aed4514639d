"""JUnit XML: a testsuite per file, a failing testcase per diagnostic; one passing suite when all is clean.

CI systems that only understand test reports (Jenkins, GitLab's test tab, Azure) can then show findings. JUnit has
no warning level: a warning is a failing case too, with a `severity` property (and its failure text says so).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from amplint.output import concise, grouped
from amplint.output.common import portable, relative_path

# Characters XML 1.0 cannot carry at all, even escaped; a message quoting odd source text must not break the file.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clean(text: str) -> str:
    """Text XML can carry: bytes of a file name that are not UTF-8 as escapes, anything else XML cannot hold as
    U+FFFD."""
    return NOT_XML.sub("\ufffd", portable(text))


def render(report) -> str:
    count = len(report.diagnostics)
    root = ET.Element("testsuites", name="amplint", tests=str(max(count, 1)), failures=str(count), errors="0")
    if not count:
        suite = ET.SubElement(root, "testsuite", name="amplint", tests="1", failures="0", errors="0", skipped="0")
        ET.SubElement(suite, "testcase", name="no findings", classname="amplint")
    for filename, diagnostics in grouped.by_file(report.diagnostics).items():
        path = clean(relative_path(filename))
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(diagnostics)),
                              failures=str(len(diagnostics)), errors="0", skipped="0")
        for diagnostic in diagnostics:
            cell = f"cell {diagnostic.cell}, " if diagnostic.cell is not None else ""
            where = f"{cell}line {diagnostic.location.row}, column {diagnostic.location.column}"
            case = ET.SubElement(suite, "testcase", name=f"{diagnostic.code} {diagnostic.name} at {where}",
                                 classname=path, file=path, line=str(diagnostic.location.row))
            properties = ET.SubElement(case, "properties")
            ET.SubElement(properties, "property", name="severity", value=diagnostic.severity.value)
            failure = ET.SubElement(case, "failure", message=clean(diagnostic.message), type=diagnostic.code)
            failure.text = clean(f"{concise.location(diagnostic)}: {diagnostic.severity.value}: {diagnostic.code} "
                                 f"{diagnostic.message}\n"
                                 + (f"help: {diagnostic.help}\n" if diagnostic.help else "")
                                 + (diagnostic.url or f"see: amplint rule {diagnostic.code}"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
