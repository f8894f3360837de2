#!/usr/bin/env python3
"""Drives `megatron-train-sim serve` with the official `openai` package.

Runs every client case against one server in one process and writes what
came back as one JSON object (to --out), for the Rust test to compare with
the spans and metrics the server exported:

- `completions`, `completions_stream`, `chat`, `chat_stream`: one request
  each, with its own W3C `traceparent` passed through `extra_headers`;
- `load`: --concurrency streaming completions at once (AsyncOpenAI), each
  asking for --load-tokens tokens with `stream_options.include_usage`.

Each request also carries the times this client measured, on the monotonic
clock (`time.perf_counter`), from just before the request is sent:
`seconds` to the whole response (the last chunk of a stream), and for
streams `first_chunk_seconds` to the first chunk that holds text. The test
bounds the server's exported TTFT, TPOT and request duration by them.

`max_retries=0` everywhere: the package retries 429 and 5xx by default,
which would hide the server's answers. Exit status 1 when a case fails.
"""

import argparse
import asyncio
import json
import sys
import time

import openai


def traceparent(n):
    return "00-%032x-%016x-01" % (0x5E4E0000000000000000000000000000 + n, 0xA0000000 + n)


def text_and_usage_of_stream(stream, chat, start):
    """The text, usage and finish reason of a stream, and the seconds from
    `start` to its first chunk with text."""
    text, usage, finish, first = "", None, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            piece = choice.delta.content if chat else choice.text
            if piece and first is None:
                first = time.perf_counter() - start
            text += piece or ""
            finish = choice.finish_reason or finish
    return text, usage, finish, first


def usage_dict(usage):
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def single_cases(client, model, max_tokens):
    results = {}
    prompt = "The quick brown fox"
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]

    headers = {"traceparent": traceparent(1)}
    start = time.perf_counter()
    response = client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0.7, top_p=0.9, seed=11, extra_headers=headers
    )
    results["completions"] = {
        "seconds": time.perf_counter() - start,
        "traceparent": headers["traceparent"],
        "text": response.choices[0].text,
        "finish_reason": response.choices[0].finish_reason,
        "id": response.id,
        "usage": usage_dict(response.usage),
    }

    headers = {"traceparent": traceparent(2)}
    start = time.perf_counter()
    stream = client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        seed=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    )
    text, usage, finish, first = text_and_usage_of_stream(stream, chat=False, start=start)
    results["completions_stream"] = {
        "seconds": time.perf_counter() - start,
        "first_chunk_seconds": first,
        "traceparent": headers["traceparent"],
        "text": text,
        "finish_reason": finish,
        "usage": usage_dict(usage),
    }

    headers = {"traceparent": traceparent(3)}
    start = time.perf_counter()
    response = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0, extra_headers=headers
    )
    results["chat"] = {
        "seconds": time.perf_counter() - start,
        "traceparent": headers["traceparent"],
        "text": response.choices[0].message.content,
        "role": response.choices[0].message.role,
        "finish_reason": response.choices[0].finish_reason,
        "id": response.id,
        "usage": usage_dict(response.usage),
    }

    headers = {"traceparent": traceparent(4)}
    start = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        seed=14,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    )
    text, usage, finish, first = text_and_usage_of_stream(stream, chat=True, start=start)
    results["chat_stream"] = {
        "seconds": time.perf_counter() - start,
        "first_chunk_seconds": first,
        "traceparent": headers["traceparent"],
        "text": text,
        "finish_reason": finish,
        "usage": usage_dict(usage),
    }

    models = client.models.list()
    results["models"] = [m.id for m in models.data]
    results["retrieved"] = client.models.retrieve(model).id
    try:
        client.models.retrieve("no-such-model")
        results["unknown_retrieved"] = {"status": 200}
    except openai.APIStatusError as error:
        results["unknown_retrieved"] = {"status": error.status_code, "body": error.body}

    try:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
        results["unknown_model"] = {"status": 200}
    except openai.APIStatusError as error:
        results["unknown_model"] = {"status": error.status_code, "body": error.body}
    return results


async def load_case(base_url, model, concurrency, tokens):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)

    async def one(i):
        start = time.perf_counter()
        try:
            stream = await client.completions.create(
                model=model,
                prompt="request %d: " % i,
                max_tokens=tokens,
                seed=i,
                stream=True,
                stream_options={"include_usage": True},
            )
            text, usage, first = "", None, None
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    if choice.text and first is None:
                        first = time.perf_counter() - start
                    text += choice.text or ""
            return {
                "text_len": len(text),
                "usage": usage_dict(usage) if usage else None,
                "error": None,
                "seconds": time.perf_counter() - start,
                "first_chunk_seconds": first,
            }
        except Exception as error:  # every failure is reported, none hidden
            return {"text_len": 0, "usage": None, "error": repr(error)}

    results = await asyncio.gather(*(one(i) for i in range(concurrency)))
    await client.close()
    return list(results)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--load-tokens", type=int, default=24)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=60)
    results = single_cases(client, args.model, args.max_tokens)
    results["load"] = asyncio.run(load_case(args.base_url, args.model, args.concurrency, args.load_tokens))
    results["openai_version"] = openai.__version__
    with open(args.out, "w") as out:
        json.dump(results, out)
    failed = [r for r in results["load"] if r["error"]]
    if failed:
        print("load errors: %s" % failed[:3], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
