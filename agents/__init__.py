"""societas.agents — who acts.

LLM backends behind one batched protocol (:class:`LLM`, :func:`load_llm`),
the :class:`Agent`, the role prompt library, output parsers, the embedded
default model, and :mod:`societas.agents.sandbox` for running untrusted code.
"""

from .agent import Agent, AgentReply, act_batch, format_inputs
from .llm import (
    LLM,
    ChatMessage,
    Completion,
    FunctionLLM,
    Prompt,
    SamplingParams,
    UnknownLLM,
    Usage,
    load_llm,
)
from .parsers import (
    answers_match,
    numeric_answer,
    extract_code,
    extract_code_blocks,
    extract_final_answer,
    extract_yaml_block,
    normalize_answer,
)
from .sandbox import Sandbox, SandboxResult, bwrap_available, run_python
from .roles import CONDUCTOR_ROLES, ROLE_PROMPTS, canonical_role, known_roles, register_role, role_prompt

__all__ = [
    "Agent",
    "AgentReply",
    "act_batch",
    "format_inputs",
    "LLM",
    "ChatMessage",
    "Completion",
    "FunctionLLM",
    "Prompt",
    "SamplingParams",
    "UnknownLLM",
    "Usage",
    "load_llm",
    "answers_match",
    "numeric_answer",
    "extract_code",
    "extract_code_blocks",
    "extract_final_answer",
    "extract_yaml_block",
    "normalize_answer",
    "Sandbox",
    "SandboxResult",
    "bwrap_available",
    "run_python",
    "CONDUCTOR_ROLES",
    "ROLE_PROMPTS",
    "canonical_role",
    "known_roles",
    "register_role",
    "role_prompt",
]


def __getattr__(name: str):  # heavy backends load on first use
    if name in ("TransformersLLM", "VLLMLLM", "OpenAICompatibleLLM", "LLMServerError"):
        from . import llm

        return getattr(llm, name)
    raise AttributeError(name)
