"""The loopback provider speaks both wire formats well enough for the real SDKs to parse it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import anthropic
import openai
import pytest
from anthropic.types import MessageParam, RawMessageDeltaEvent, RawMessageStartEvent

from .loopback import ANSWER, ANTHROPIC_PATH, OPENAI_PATH, LoopbackServer, Reply, ToolCall

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

KEY = "test-key-not-a-secret"
OPENAI_QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "why is checkout down?"}
]
ANTHROPIC_QUESTION: list[MessageParam] = [{"role": "user", "content": "why is checkout down?"}]


def _openai(server: LoopbackServer) -> openai.OpenAI:
    return openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0)


def _anthropic(server: LoopbackServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0)


def test_openai_json_answer_with_usage_and_tool_calls(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(input_tokens=7, output_tokens=3),
        Reply(text="", tool_calls=(ToolCall("read_logs", {"service": "checkout"}),)),
    )
    with _openai(loopback) as client:
        first = client.chat.completions.create(model="gpt-test", messages=OPENAI_QUESTION)
        second = client.chat.completions.create(model="gpt-test", messages=OPENAI_QUESTION)
    assert first.choices[0].message.content == ANSWER
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (7, 3)
    calls = second.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].type == "function"
    assert (calls[0].function.name, calls[0].function.arguments) == (
        "read_logs",
        '{"service": "checkout"}',
    )
    assert second.choices[0].finish_reason == "tool_calls"
    assert [seen.path for seen in loopback.requests] == [OPENAI_PATH, OPENAI_PATH]


def test_openai_stream_sends_the_usage_chunk_only_when_asked(loopback: LoopbackServer) -> None:
    with _openai(loopback) as client:
        asked = list(
            client.chat.completions.create(
                model="gpt-test",
                messages=OPENAI_QUESTION,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        unasked = list(
            client.chat.completions.create(model="gpt-test", messages=OPENAI_QUESTION, stream=True)
        )
    text = "".join(c.choices[0].delta.content or "" for c in asked if c.choices)
    assert text == ANSWER
    assert asked[-1].choices == []
    assert asked[-1].usage is not None
    assert asked[-1].usage.total_tokens == 17
    assert all(chunk.usage is None for chunk in unasked)
    assert loopback.count == 2


def test_anthropic_json_and_stream(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(input_tokens=30, output_tokens=4), Reply(input_tokens=31, output_tokens=6)
    )
    with _anthropic(loopback) as client:
        message = client.messages.create(
            model="claude-test", max_tokens=64, messages=ANTHROPIC_QUESTION
        )
        events = list(
            client.messages.create(
                model="claude-test",
                max_tokens=64,
                messages=ANTHROPIC_QUESTION,
                stream=True,
            )
        )
    assert message.usage.input_tokens == 30
    assert message.usage.output_tokens == 4
    assert [getattr(event, "type", None) for event in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start, delta = events[0], events[-2]
    assert isinstance(start, RawMessageStartEvent)
    assert start.message.usage.input_tokens == 31
    assert isinstance(delta, RawMessageDeltaEvent)
    assert delta.usage.output_tokens == 6
    assert [seen.path for seen in loopback.requests] == [ANTHROPIC_PATH, ANTHROPIC_PATH]


@pytest.mark.parametrize("status", [500, 429])
def test_scripted_status_reaches_the_sdk_as_its_error(
    loopback: LoopbackServer, status: int
) -> None:
    loopback.script(Reply(status=status, retry_after=3))
    with _openai(loopback) as client, pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="gpt-test", messages=OPENAI_QUESTION)
    assert caught.value.status_code == status
    assert caught.value.response.headers.get("retry-after") == ("3" if status == 429 else None)
    assert loopback.count == 1


def test_a_stall_holds_the_answer_until_the_test_releases_it(loopback: LoopbackServer) -> None:
    release = threading.Event()
    loopback.script(Reply(stall=release))
    answers: list[str | None] = []

    def ask() -> None:
        with _openai(loopback) as client:
            completion = client.chat.completions.create(model="gpt-test", messages=OPENAI_QUESTION)
            answers.append(completion.choices[0].message.content)

    asker = threading.Thread(target=ask)
    asker.start()
    loopback.wait_for_stalled(1)
    assert answers == []  # held: the client is still waiting
    release.set()
    asker.join()
    assert answers == [ANSWER]
    assert loopback.stalled == 0
