"""The document set the vector DB is seeded with: Markdown files cut at their ``##`` headings.

Each chunk's id is ``<file stem>#<heading slug>`` (``vector-db-outage#no-context-answers``), the
same anchor a report links a failed check to, so the standard queries of the recall probe can
name the chunk they expect. Seeding is an upsert: running it again (after a vector DB restart)
changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stack.rag.clients import TritonEmbedder, VectorStore

__all__ = ["SHIPPED_CORPUS", "Chunk", "load_corpus", "seed"]

SHIPPED_CORPUS = Path(__file__).resolve().parents[2] / "scenarios" / "runbooks"
DIMENSIONS = 384
BATCH = 16


@dataclass(frozen=True)
class Chunk:
    id: str
    source: str
    title: str
    text: str


def _slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def chunks_of(path: Path) -> list[Chunk]:
    """One chunk per ``##`` section; the text before the first one is the ``#overview``."""
    text = path.read_text(encoding="utf-8")
    title = path.stem
    sections: list[tuple[str, list[str]]] = [("overview", [])]
    for line in text.splitlines():
        if line.startswith("# "):
            title = line[2:].strip()
            continue
        if line.startswith("## "):
            sections.append((line[3:].strip(), []))
            continue
        sections[-1][1].append(line)
    result = []
    for heading, lines in sections:
        body = "\n".join(lines).strip()
        if not body:
            continue
        name = "overview" if heading == "overview" else heading
        result.append(
            Chunk(
                id=f"{path.stem}#{_slug(heading)}",
                source=path.name,
                title=f"{title}: {name}",
                text=f"{title}. {name}.\n{body}",
            )
        )
    return result


def load_corpus(paths: list[str] | None = None) -> list[Chunk]:
    """Chunks of every ``.md`` file under ``paths`` (the shipped runbooks when empty)."""
    roots = [Path(p) for p in paths] if paths else [SHIPPED_CORPUS]
    files: list[Path] = []
    for root in roots:
        if root.is_dir():
            files.extend(sorted(root.rglob("*.md")))
        elif root.exists():
            files.append(root)
        else:
            raise FileNotFoundError(f"corpus path {root} does not exist")
    chunks = [c for f in files for c in chunks_of(f)]
    if not chunks:
        raise ValueError(f"no Markdown sections found under {', '.join(map(str, roots))}")
    return chunks


async def seed(
    chunks: list[Chunk], embedder: TritonEmbedder, store: VectorStore, *, timeout: float = 30.0
) -> int:
    """Embed every chunk on Triton and upsert it into ``store``; the number of chunks."""
    await store.ensure_collection(DIMENSIONS, timeout=timeout)
    for i in range(0, len(chunks), BATCH):
        part = chunks[i : i + BATCH]
        vectors = await embedder.embed([c.text for c in part], timeout=timeout)
        await store.upsert(
            [c.id for c in part],
            vectors,
            [c.text for c in part],
            [{"source": c.source, "title": c.title} for c in part],
            timeout=timeout,
        )
    return len(chunks)
