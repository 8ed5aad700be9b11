"""A computer-use loop: every step the agent takes a screenshot, which comes back as a tool result
holding an image, and every request to the model is built within a budget that keeps the
newest screenshots and the conversation around them.

    CONTEXTSTORE_URL=redis://localhost:6379/0 python computer_use.py

The images are real PNGs (1280x800, one colour each, so the program needs no screen). Each
counts the tokens the providers charge for an image of its size, read from its header.
"""

from __future__ import annotations

import base64
import struct
import zlib

import contextstore as cs

WINDOW = "computer-use"
STEPS = 12


def screenshot(step: int, width: int = 1280, height: int = 800) -> bytes:
    """A PNG of one colour (a stand-in for the screen at ``step``)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes((step * 20 % 256, 90, 160)) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(row * height, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def take_step(win: cs.ContextWindow, step: int) -> None:
    """The model asked for a screenshot (a tool call); the tool answers with the image."""
    call = {"id": f"shot_{step}", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}
    image = base64.b64encode(screenshot(step)).decode()
    win.add_many([
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
        {"role": "tool", "metadata": {"tool_call_id": f"shot_{step}"}, "content": [
            {"type": "text", "text": f"the screen after step {step}"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}},
        ]},
    ])  # fmt: skip


def main() -> None:
    """Run the loop, then build the request the model would get next, in both formats."""
    store = cs.ContextStore.from_env()
    win = store.window(WINDOW, max_tokens=200_000)
    win.clear(include_pinned=True)
    win.add("You operate a desktop. Take a screenshot before each action.", role="system", pinned=True)
    win.add("Open the settings and turn on dark mode.", role="user")
    for step in range(STEPS):
        take_step(win, step)
    shot = win.items()[-1]
    print(f"{STEPS} screenshots stored; one counts {shot.token_count} tokens")
    budget = cs.BuildOptions(max_tokens=6000, reserve_for_response=0, max_history_items=100)
    built = win.build_messages_structured(budget, format="anthropic")
    images = [
        block
        for turn in built.messages["messages"]
        for part in turn["content"]
        if part["type"] == "tool_result"
        for block in part["content"]
        if block["type"] == "image"
    ]
    print(f"within {budget.max_tokens} tokens: the newest {len(images)} screenshots, {built.total_tokens} tokens")
    try:
        win.build_messages(budget)  # OpenAI's tool messages take text only
    except cs.InvalidItemError as refused:
        print(f"for OpenAI: {refused}")
    store.close()


if __name__ == "__main__":
    main()
