"""How ``chd query`` shows an answer to a person: one header line, then what the operation returned."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["human"]


def human(answer: dict[str, Any]) -> str:
    result, meta = answer["result"], answer["metadata"]
    lines = [
        f"{answer['operation']} · conversation {meta.get('conversation_id', '?')} · "
        f"{meta.get('items_affected', 0)} item(s) · {meta.get('tokens_used', 0)} token(s)"
    ]
    if "context" in result:
        # The text to paste into a prompt, shown as is.
        lines.append(f"context ({result['tokens']} of {result['token_limit']} tokens):")
        lines.append(_indented(result["context"]))
        return "\n".join(lines)
    if "utterance" in result:
        lines.append(utterance_line(result["utterance"]))
    if result.get("evicted"):
        lines.append(f"evicted: {', '.join(f'#{s}' for s in result['evicted'])}")
    for u in result.get("utterances", []):
        lines.append(utterance_line(u))
    if "removed" in result:
        removed = result["removed"]
        lines.append(f"removed: {', '.join(f'#{s}' for s in removed) if removed else 'nothing'}")
        # Forgetting reaches the summary too; say so, or "nothing" would mislead.
        for what in ("dropped", "rebuilt"):
            count = result.get(f"summary_segments_{what}", 0)
            if count:
                lines.append(f"summary segments {what}: {count}")
    if "summary_hit" in result:
        hit = result["summary_hit"]
        lines.append(f"summary matches too, score {hit['score']:.3f}: {hit['text']}")
    if answer["operation"] in ("configure", "stats"):
        # "evicted" was shown above as seqs; the rest as the fields they are.
        lines.extend(
            f"{key}: {json.dumps(value, sort_keys=True)}"
            for key, value in sorted(result.items())
            if key != "evicted"
        )
    if "summary" in result:
        tokens = result.get("tokens", result.get("summary_tokens", 0))
        lines.append(f"summary ({tokens} tokens):")
        lines.append(_indented(result["summary"]))
    return "\n".join(lines)


def _indented(text: str) -> str:
    """``text`` two spaces in, an empty line left empty (no trailing blanks in the output)."""
    if not text:
        return "  (empty)"
    return "\n".join(f"  {line}" if line else "" for line in text.split("\n"))


def utterance_line(u: dict[str, Any]) -> str:
    score = f"  score {u['score']:.3f}" if "score" in u else ""
    where = u.get("where", "buffer")
    if where == "summary":  # a summary segment among a topic search's hits (issue 27)
        return f"summary [turns {u['turn_from']}-{u['turn_to']}]: {u['text']}{score}"
    place = "" if where == "buffer" else f" ({where})"
    return f"#{u['seq']} [turn {u['turn_number']}] {u['speaker']}{place}: {u['text']}{score}"
