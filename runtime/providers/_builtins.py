"""The builtin providers: the 27 of QwenPaw's registry, a few more, and ``sim``.

Base URLs carry the protocol's version prefix, because the codecs append only the operation
(``/chat/completions``, ``/messages``, ``/models/{m}:generateContent``, ``/api/chat``). Tool
capabilities follow :func:`sluice._capabilities.capabilities_for` for the names it knows
and the protocol's assumption for the others (every ``tool_choice`` mode, for an OpenAI-protocol
server), except where a server is known to refuse a mode (Kimi). Quirks are set only where a
server is known to need them. ``batch_api`` is set where the provider documents a batch API:
OpenAI's Files + Batches (OpenAI, Groq, DashScope, the simulator), Anthropic's Message Batches.

Each definition is built when first looked up (:data:`BUILTIN_BY_ID`): a program that calls one
provider validates and builds one definition, not thirty-five.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from .._protocols.quirks import RequestQuirks
from .._tool_capabilities import (
    ANTHROPIC,
    FULL,
    GEMINI,
    OLLAMA,
    OPENAI,
    WITHOUT_TOOLS,
    ToolCapabilities,
)
from ._definition import ModelInfo, ProviderDefinition, models

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    BUILTINS: tuple[ProviderDefinition, ...]
    """Every builtin, in the order of provider-layer.md section 8 (then sluice's own); all are
    built when this is first read (``__getattr__`` below)."""

__all__ = ["BUILTINS", "BUILTIN_BY_ID"]

STRICT_OPENAI: Final = RequestQuirks(echo_reasoning_content=False)
"""Servers that validate message fields and reject ``reasoning_content``."""
OPENAI_QUIRKS: Final = RequestQuirks(
    echo_reasoning_content=False, max_tokens_field="max_completion_tokens"
)
"""OpenAI's own API: reasoning models refuse ``max_tokens``; every model takes
``max_completion_tokens``."""
VLLM_QUIRKS: Final = RequestQuirks(omit_tool_choice=frozenset({"auto"}))
"""vLLM refuses ``tool_choice: "auto"`` unless started with ``--enable-auto-tool-choice``
(and ``auto`` is its default anyway)."""
KIMI_TOOLS: Final = ToolCapabilities(
    tool_choice=frozenset({"auto", "none"}), structured_output="json_object", top_level_unions=False
)
"""Moonshot's API refuses a forced ``tool_choice`` (``required`` or a named tool) while its
models think, and every Kimi model thinks: a forced call goes through JSON mode instead."""

_CODING_PLAN_MODELS = models(
    "qwen3.6-plus",
    "qwen3.5-plus",
    "glm-5",
    "glm-4.7",
    "MiniMax-M2.5",
    "kimi-k2.5",
    "qwen3-max-2026-01-23",
    "qwen3-coder-next",
    "qwen3-coder-plus",
)
_ZHIPU_MODELS = models(
    "glm-5", "glm-5.1", "glm-5-turbo", "glm-5v-turbo", vision={"glm-5v-turbo"}, reasoning=True
)
_KIMI_MODELS = models(
    "kimi-k2.5",
    "kimi-k2-0905-preview",
    "kimi-k2-0711-preview",
    "kimi-k2-turbo-preview",
    "kimi-k2-thinking",
    "kimi-k2-thinking-turbo",
    vision={"kimi-k2.5"},
    reasoning={"kimi-k2.5", "kimi-k2-thinking", "kimi-k2-thinking-turbo"},
)
_MINIMAX_MODELS = models(
    "MiniMax-M2.5",
    "MiniMax-M2.5-highspeed",
    "MiniMax-M2.7",
    "MiniMax-M2.7-highspeed",
    reasoning=True,
)
_DOUBAO_CODE = (
    "doubao-seed-2-0-code-preview-260215",
    "doubao-seed-2-0-pro-260215",
    "doubao-seed-2-0-lite-260428",
    "doubao-seed-code-preview-251028",
)


def _openai_compatible(
    id: str,
    name: str,
    base_url: str | None,
    key_env: str | tuple[str, ...] = (),
    *,
    model_list: tuple[ModelInfo, ...] = (),
    **more: object,
) -> ProviderDefinition:
    keys = (key_env,) if isinstance(key_env, str) else key_env
    return ProviderDefinition(
        id=id,
        display_name=name,
        protocol="openai",
        base_url=base_url,
        key_env=keys,
        models=model_list,
        **more,  # type: ignore[arg-type]
    )


_MAKERS: Final[Mapping[str, Callable[[], ProviderDefinition]]] = {
    # The 27 of provider-layer.md section 8, in its order.
    "qwenpaw-local": lambda: _openai_compatible(
        "qwenpaw-local",
        "QwenPaw Local",
        None,
        needs_key=False,
        local=True,
        aliases=("copaw-local",),
    ),
    "ollama": lambda: ProviderDefinition(
        id="ollama",
        display_name="Ollama",
        protocol="ollama",
        base_url="http://127.0.0.1:11434",
        base_url_env="OLLAMA_HOST",
        key_env=("OLLAMA_API_KEY",),
        needs_key=False,
        local=True,
        capabilities=OLLAMA,
    ),
    "lmstudio": lambda: _openai_compatible(
        "lmstudio", "LM Studio", "http://localhost:1234/v1", needs_key=False, local=True
    ),
    "openrouter": lambda: _openai_compatible(
        "openrouter",
        "OpenRouter",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
        key_prefix="sk-or-v1-",
        headers={"X-Title": "sluice"},
    ),
    "modelscope": lambda: _openai_compatible(
        "modelscope",
        "ModelScope",
        "https://api-inference.modelscope.cn/v1",
        "MODELSCOPE_API_KEY",
        key_prefix="ms",
        model_list=models(
            "Qwen/Qwen3.5-122B-A10B", "ZhipuAI/GLM-5", vision={"Qwen/Qwen3.5-122B-A10B"}
        ),
    ),
    "dashscope": lambda: _openai_compatible(
        "dashscope",
        "DashScope",
        "https://dashscope.aliyuncs.com/compatible-mode/v1",
        "DASHSCOPE_API_KEY",
        key_prefix="sk",
        batch_api="openai",
        regions={
            "intl": "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
            "us": "https://dashscope-us.aliyuncs.com/compatible-mode/v1",
        },
        model_list=models(
            "qwen3-max",
            "qwen3-235b-a22b-thinking-2507",
            "deepseek-v3.2",
            reasoning={"qwen3-235b-a22b-thinking-2507"},
        ),
    ),
    "aliyun-codingplan": lambda: _openai_compatible(
        "aliyun-codingplan",
        "Aliyun Coding Plan (China)",
        "https://coding.dashscope.aliyuncs.com/v1",
        "ALIYUN_CODINGPLAN_API_KEY",
        key_prefix="sk-sp",
        lists_models=False,
        model_list=_CODING_PLAN_MODELS,
    ),
    "aliyun-codingplan-intl": lambda: _openai_compatible(
        "aliyun-codingplan-intl",
        "Aliyun Coding Plan (International)",
        "https://coding-intl.dashscope.aliyuncs.com/v1",
        "ALIYUN_CODINGPLAN_API_KEY",
        key_prefix="sk-sp",
        lists_models=False,
        model_list=_CODING_PLAN_MODELS,
    ),
    "aliyun-tokenplan": lambda: _openai_compatible(
        "aliyun-tokenplan",
        "Aliyun Token Plan",
        "https://token-plan.cn-beijing.maas.aliyuncs.com/compatible-mode/v1",
        "ALIYUN_TOKENPLAN_API_KEY",
        key_prefix="sk-sp",
        lists_models=False,
        model_list=models("qwen3.6-plus", "glm-5", "MiniMax-M2.5", "deepseek-v3.2", "kimi-k2.5"),
    ),
    "opencode": lambda: _openai_compatible(
        "opencode",
        "OpenCode",
        "https://opencode.ai/zen/v1",
        "OPENCODE_API_KEY",
        needs_key=False,
        regions={"go": "https://opencode.ai/zen/go/v1"},
        model_list=models(
            "big-pickle",
            "nemotron-3-super-free",
            "glm-5.1",
            "glm-5",
            "kimi-k2.5",
            "kimi-k2.6",
            "deepseek-v4-pro",
            "deepseek-v4-flash",
            "mimo-v2.5",
            "mimo-v2.5-pro",
            "qwen3.6-plus",
            "qwen3.5-plus",
        ),
    ),
    "openai": lambda: _openai_compatible(
        "openai",
        "OpenAI",
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
        key_prefix="sk-",
        batch_api="openai",
        capabilities=OPENAI,
        quirks=OPENAI_QUIRKS,
        drop_params=frozenset({"top_k"}),
        model_list=models(
            "gpt-5.2",
            "gpt-5",
            "gpt-5-mini",
            "gpt-5-nano",
            "gpt-4.1",
            "gpt-4.1-mini",
            "gpt-4.1-nano",
            "o3",
            "o4-mini",
            "gpt-4o",
            "gpt-4o-mini",
            vision=True,
            reasoning={"gpt-5.2", "gpt-5", "gpt-5-mini", "gpt-5-nano", "o3", "o4-mini"},
        ),
    ),
    "azure-openai": lambda: _openai_compatible(
        "azure-openai",
        "Azure OpenAI",
        None,  # https://RESOURCE.openai.azure.com/openai/v1, from the config
        "AZURE_OPENAI_API_KEY",
        auth="api-key",
        quirks=OPENAI_QUIRKS,
        drop_params=frozenset({"top_k"}),
        model_list=models(
            "gpt-5-chat",
            "gpt-5-mini",
            "gpt-5-nano",
            "gpt-4.1",
            "gpt-4.1-mini",
            "gpt-4.1-nano",
            "gpt-4o",
            "gpt-4o-mini",
            vision=True,
            reasoning={"gpt-5-mini", "gpt-5-nano"},
        ),
    ),
    "anthropic": lambda: ProviderDefinition(
        id="anthropic",
        display_name="Anthropic",
        protocol="anthropic",
        base_url="https://api.anthropic.com/v1",
        batch_api="anthropic",
        key_env=("ANTHROPIC_API_KEY",),
        key_prefix="sk-ant-",
        capabilities=ANTHROPIC,
        models=models(
            "claude-sonnet-4-5",
            "claude-opus-4-5",
            "claude-haiku-4-5",
            vision=True,
            reasoning=True,
        ),
    ),
    "gemini": lambda: ProviderDefinition(
        id="gemini",
        display_name="Google Gemini",
        protocol="gemini",
        base_url="https://generativelanguage.googleapis.com/v1beta",
        key_env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        capabilities=GEMINI,
        models=models(
            "gemini-3.1-pro-preview",
            "gemini-3-flash-preview",
            "gemini-3.1-flash-lite-preview",
            "gemini-2.5-pro",
            "gemini-2.5-flash",
            "gemini-2.5-flash-lite",
            "gemini-2.0-flash",
            vision=True,
            reasoning={
                "gemini-3.1-pro-preview",
                "gemini-3-flash-preview",
                "gemini-3.1-flash-lite-preview",
                "gemini-2.5-pro",
                "gemini-2.5-flash",
                "gemini-2.5-flash-lite",
            },
        ),
    ),
    "deepseek": lambda: _openai_compatible(
        "deepseek",
        "DeepSeek",
        "https://api.deepseek.com",
        "DEEPSEEK_API_KEY",
        key_prefix="sk-",
        model_list=models(
            "deepseek-chat",
            "deepseek-reasoner",
            "deepseek-v4-flash",
            "deepseek-v4-pro",
            reasoning={"deepseek-reasoner", "deepseek-v4-flash", "deepseek-v4-pro"},
        ),
    ),
    "kimi-cn": lambda: _openai_compatible(
        "kimi-cn",
        "Kimi (China)",
        "https://api.moonshot.cn/v1",
        "MOONSHOT_API_KEY",
        capabilities=KIMI_TOOLS,
        model_list=_KIMI_MODELS,
    ),
    "kimi-intl": lambda: _openai_compatible(
        "kimi-intl",
        "Kimi (International)",
        "https://api.moonshot.ai/v1",
        "MOONSHOT_API_KEY",
        capabilities=KIMI_TOOLS,
        model_list=_KIMI_MODELS,
    ),
    "minimax-cn": lambda: ProviderDefinition(
        id="minimax-cn",
        display_name="MiniMax (China)",
        protocol="anthropic",
        base_url="https://api.minimaxi.com/anthropic/v1",
        key_env=("MINIMAX_API_KEY",),
        lists_models=False,
        models=_MINIMAX_MODELS,
    ),
    "minimax": lambda: ProviderDefinition(
        id="minimax",
        display_name="MiniMax (International)",
        protocol="anthropic",
        base_url="https://api.minimax.io/anthropic/v1",
        key_env=("MINIMAX_API_KEY",),
        lists_models=False,
        models=_MINIMAX_MODELS,
    ),
    "zhipu-cn": lambda: _openai_compatible(
        "zhipu-cn",
        "Zhipu (BigModel)",
        "https://open.bigmodel.cn/api/paas/v4",
        ("ZHIPUAI_API_KEY", "ZHIPU_API_KEY"),
        model_list=_ZHIPU_MODELS,
    ),
    "zhipu-cn-codingplan": lambda: _openai_compatible(
        "zhipu-cn-codingplan",
        "Zhipu Coding Plan (BigModel)",
        "https://open.bigmodel.cn/api/coding/paas/v4",
        ("ZHIPUAI_API_KEY", "ZHIPU_API_KEY"),
        lists_models=False,
        model_list=_ZHIPU_MODELS,
    ),
    "zhipu-intl": lambda: _openai_compatible(
        "zhipu-intl",
        "Zhipu (Z.AI)",
        "https://api.z.ai/api/paas/v4",
        ("ZAI_API_KEY",),
        model_list=_ZHIPU_MODELS,
    ),
    "zhipu-intl-codingplan": lambda: _openai_compatible(
        "zhipu-intl-codingplan",
        "Zhipu Coding Plan (Z.AI)",
        "https://api.z.ai/api/coding/paas/v4",
        ("ZAI_API_KEY",),
        lists_models=False,
        model_list=_ZHIPU_MODELS,
    ),
    "siliconflow-cn": lambda: _openai_compatible(
        "siliconflow-cn",
        "SiliconFlow (China)",
        "https://api.siliconflow.cn/v1",
        "SILICONFLOW_API_KEY",
        key_prefix="sk-",
    ),
    "siliconflow-intl": lambda: _openai_compatible(
        "siliconflow-intl",
        "SiliconFlow (International)",
        "https://api.siliconflow.com/v1",
        "SILICONFLOW_API_KEY",
        key_prefix="sk-",
    ),
    "volcengine-cn": lambda: _openai_compatible(
        "volcengine-cn",
        "Volcano Engine",
        "https://ark.cn-beijing.volces.com/api/v3",
        "ARK_API_KEY",
        model_list=models(
            *_DOUBAO_CODE,
            "glm-4-7-251222",
            "deepseek-v3-2-251201",
            "doubao-seed-1-8-251228",
            "doubao-seed-2-0-mini-260428",
            "doubao-seed-character-251128",
        ),
    ),
    "volcengine-cn-codingplan": lambda: _openai_compatible(
        "volcengine-cn-codingplan",
        "Volcano Engine Coding Plan",
        "https://ark.cn-beijing.volces.com/api/coding/v3",
        "ARK_API_KEY",
        lists_models=False,
        model_list=models(
            *_DOUBAO_CODE,
            "glm-5.1",
            "minimax-m2.7",
            "kimi-k2.6",
            "kimi-k2.5",
            "glm-4-7-251222",
            "deepseek-v3-2-251201",
        ),
    ),
    # Further hosted OpenAI-compatible services.
    "groq": lambda: _openai_compatible(
        "groq",
        "Groq",
        "https://api.groq.com/openai/v1",
        "GROQ_API_KEY",
        key_prefix="gsk_",
        batch_api="openai",
        quirks=STRICT_OPENAI,
        model_list=models(
            "llama-3.3-70b-versatile",
            "llama-3.1-8b-instant",
            "openai/gpt-oss-120b",
            "openai/gpt-oss-20b",
            reasoning={"openai/gpt-oss-120b", "openai/gpt-oss-20b"},
        ),
    ),
    "together": lambda: _openai_compatible(
        "together",
        "Together AI",
        "https://api.together.xyz/v1",
        "TOGETHER_API_KEY",
        model_list=models(
            "meta-llama/Llama-3.3-70B-Instruct-Turbo",
            "deepseek-ai/DeepSeek-V3",
            "Qwen/Qwen2.5-72B-Instruct-Turbo",
        ),
    ),
    "fireworks": lambda: _openai_compatible(
        "fireworks",
        "Fireworks AI",
        "https://api.fireworks.ai/inference/v1",
        "FIREWORKS_API_KEY",
        key_prefix="fw_",
        model_list=models(
            "accounts/fireworks/models/llama-v3p3-70b-instruct",
            "accounts/fireworks/models/deepseek-v3",
        ),
    ),
    "mistral": lambda: _openai_compatible(
        "mistral",
        "Mistral AI",
        "https://api.mistral.ai/v1",
        "MISTRAL_API_KEY",
        quirks=STRICT_OPENAI,
        drop_params=frozenset({"top_k"}),
        model_list=models(
            "mistral-large-latest",
            "mistral-medium-latest",
            "mistral-small-latest",
            "codestral-latest",
            "magistral-medium-latest",
            vision={"mistral-medium-latest", "mistral-small-latest"},
            reasoning={"magistral-medium-latest"},
        ),
    ),
    "xai": lambda: _openai_compatible(
        "xai",
        "xAI",
        "https://api.x.ai/v1",
        "XAI_API_KEY",
        key_prefix="xai-",
        model_list=models(
            "grok-4",
            "grok-3",
            "grok-3-mini",
            vision={"grok-4"},
            reasoning={"grok-4", "grok-3-mini"},
        ),
    ),
    # Local servers.
    "vllm": lambda: _openai_compatible(
        "vllm",
        "vLLM",
        "http://localhost:8000/v1",
        "VLLM_API_KEY",
        needs_key=False,
        local=True,
        quirks=VLLM_QUIRKS,
    ),
    "llamacpp": lambda: _openai_compatible(
        "llamacpp",
        "llama.cpp server",
        "http://127.0.0.1:8080/v1",
        "LLAMA_API_KEY",
        needs_key=False,
        local=True,
    ),
    # The simulator the runtime starts in-process (base URL filled in at start). Its models
    # named ...notools act as a server without tool support (sluice.simulator._request).
    "sim": lambda: _openai_compatible(
        "sim",
        "sluice simulator",
        None,
        needs_key=False,
        local=True,
        in_process=True,
        capabilities=FULL,
        batch_api="openai",  # it serves Message Batches too, for a provider that points here
        model_capabilities={"notools": WITHOUT_TOOLS},
        model_list=models("sim-small"),
    ),
}

_ALIASES: Final[Mapping[str, str]] = {"copaw-local": "qwenpaw-local"}
"""Older names of builtins (each definition's ``aliases``), to the id they stand for."""


class _Builtins(Mapping[str, ProviderDefinition]):
    """Every builtin by id and by alias, in :data:`BUILTINS`' order (each id, then its
    aliases). A definition is built when first looked up, and kept: a program that calls one
    provider builds one definition, not all of them."""

    def __init__(self) -> None:
        self._made: dict[str, ProviderDefinition] = {}
        self._names = [
            n for i in _MAKERS for n in (i, *(a for a, to in _ALIASES.items() if to == i))
        ]

    def __getitem__(self, name: str) -> ProviderDefinition:
        key = _ALIASES.get(name, name)
        made = self._made.get(key)
        if made is None:
            # setdefault: two threads (sluice.sync) building the same one at once both get
            # the one kept, as with the module constant this table replaced.
            made = self._made.setdefault(key, _MAKERS[key]())  # KeyError: not a builtin
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in _MAKERS or name in _ALIASES


BUILTIN_BY_ID: Final[Mapping[str, ProviderDefinition]] = _Builtins()
"""Every builtin by id and by alias."""


def __getattr__(name: str) -> Any:
    # BUILTINS builds every definition: it is made when first asked for (a listing, the CLI).
    if name == "BUILTINS":
        builtins = globals().setdefault("BUILTINS", tuple(BUILTIN_BY_ID[i] for i in _MAKERS))
        return builtins
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
