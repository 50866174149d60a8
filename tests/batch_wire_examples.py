"""Bodies as the providers document them for their batch APIs (OpenAI's Files + Batches,
Anthropic's Message Batches), fields sluice ignores included, for the wire-shape tests of
tests/test_provider_batch_wire.py. Ids, times and texts are the documentation's kind of values,
written here; nothing is read from outside the repository."""

from __future__ import annotations

from typing import Any

OPENAI_FILE: dict[str, Any] = {
    "id": "file-abc123",
    "object": "file",
    "bytes": 120000,
    "created_at": 1677610602,
    "expires_at": 1680202602,
    "filename": "batchinput.jsonl",
    "purpose": "batch",
    "status": "processed",
    "status_details": None,
}

OPENAI_BATCH: dict[str, Any] = {
    "id": "batch_abc123",
    "object": "batch",
    "endpoint": "/v1/chat/completions",
    "model": "gpt-4o-mini-2024-07-18",
    "errors": None,
    "input_file_id": "file-abc123",
    "completion_window": "24h",
    "status": "validating",
    "output_file_id": None,
    "error_file_id": None,
    "created_at": 1711471533,
    "in_progress_at": None,
    "expires_at": 1711557933,
    "finalizing_at": None,
    "completed_at": None,
    "failed_at": None,
    "expired_at": None,
    "cancelling_at": None,
    "cancelled_at": None,
    "request_counts": {"total": 0, "completed": 0, "failed": 0},
    "usage": None,
    "metadata": {"sluice_fingerprint": "fp-1"},
}

OPENAI_BATCH_DONE: dict[str, Any] = OPENAI_BATCH | {
    "status": "completed",
    "output_file_id": "file-cvaTdG",
    "error_file_id": "file-HOWS94",
    "in_progress_at": 1711471538,
    "finalizing_at": 1711493133,
    "completed_at": 1711493163,
    "request_counts": {"total": 3, "completed": 1, "failed": 2},
    "usage": {
        "input_tokens": 1500,
        "input_tokens_details": {"cached_tokens": 1024},
        "output_tokens": 500,
        "output_tokens_details": {"reasoning_tokens": 300},
        "total_tokens": 2000,
    },
}

OPENAI_BATCH_FAILED: dict[str, Any] = OPENAI_BATCH | {
    "status": "failed",
    "failed_at": 1711471540,
    "errors": {
        "object": "list",
        "data": [
            {
                "code": "token_limit_exceeded",
                "line": None,
                "message": "Enqueued token limit reached for gpt-4o-mini in organization "
                "org-abc. Limit: 2,000,000 enqueued tokens. Please try again once some "
                "in_progress batches have been completed.",
                "param": None,
            }
        ],
    },
}

OPENAI_CHAT_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-123",
    "object": "chat.completion",
    "created": 1711475054,
    "model": "gpt-4o-mini-2024-07-18",
    "system_fingerprint": "fp_3bc1b5746c",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello! How can I assist you today?",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 22,
        "completion_tokens": 9,
        "total_tokens": 31,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
}

OPENAI_OUTPUT_LINE: dict[str, Any] = {
    "id": "batch_req_wnaDys",
    "custom_id": "request-2",
    "response": {
        "status_code": 200,
        "request_id": "req_c187b3",
        "body": OPENAI_CHAT_COMPLETION,
    },
    "error": None,
}

OPENAI_ERROR_LINE: dict[str, Any] = {
    "id": "batch_req_456",
    "custom_id": "request-1",
    "response": {
        "status_code": 400,
        "request_id": "req_789",
        "body": {
            "error": {
                "message": "Invalid value for 'temperature': must be between 0 and 2.",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "invalid_value",
            }
        },
    },
    "error": None,
}

OPENAI_EXPIRED_LINE: dict[str, Any] = {
    "id": "batch_req_123",
    "custom_id": "request-3",
    "response": None,
    "error": {
        "code": "batch_expired",
        "message": "This request could not be executed before the completion window expired.",
    },
}

ANTHROPIC_BATCH: dict[str, Any] = {
    "id": "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message_batch",
    "processing_status": "in_progress",
    "request_counts": {
        "processing": 2,
        "succeeded": 0,
        "errored": 0,
        "canceled": 0,
        "expired": 0,
    },
    "ended_at": None,
    "created_at": "2024-09-24T18:37:24.100435Z",
    "expires_at": "2024-09-25T18:37:24.100435Z",
    "archived_at": None,
    "cancel_initiated_at": None,
    "results_url": None,
}

ANTHROPIC_BATCH_ENDED: dict[str, Any] = ANTHROPIC_BATCH | {
    "processing_status": "ended",
    "request_counts": {
        "processing": 0,
        "succeeded": 1,
        "errored": 1,
        "canceled": 1,
        "expired": 1,
    },
    "ended_at": "2024-09-24T19:02:11.948571Z",
    "results_url": "https://api.anthropic.com/v1/messages/batches/"
    "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF/results",
}

ANTHROPIC_MESSAGE: dict[str, Any] = {
    "id": "msg_014VwiXbi91y3JMjcpyGBHX5",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Hello again! It's nice to see you."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 11,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 36,
        "service_tier": "batch",
    },
    "container": None,
}

ANTHROPIC_RESULTS: list[dict[str, Any]] = [
    {
        "custom_id": "my-second-request",
        "result": {"type": "succeeded", "message": ANTHROPIC_MESSAGE},
    },
    {
        "custom_id": "my-first-request",
        "result": {
            "type": "errored",
            "error": {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "max_tokens: Field required",
                },
                "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
            },
        },
    },
    {"custom_id": "my-third-request", "result": {"type": "canceled"}},
    {"custom_id": "my-fourth-request", "result": {"type": "expired"}},
]

ANTHROPIC_REALTIME_MESSAGE: dict[str, Any] = ANTHROPIC_MESSAGE | {
    "usage": ANTHROPIC_MESSAGE["usage"] | {"service_tier": "standard"}
}
