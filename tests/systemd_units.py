"""systemd unit files read back as systemd reads their settings."""

from __future__ import annotations


def directives(text: str) -> dict[str, dict[str, list[str]]]:
    """A unit's settings by section and key, every value of a repeated key kept."""
    sections: dict[str, dict[str, list[str]]] = {}
    section: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
        elif line:
            key, _, value = line.partition("=")
            section.setdefault(key, []).append(value)
    return sections
