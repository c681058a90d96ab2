"""societas.agents — who acts.

LLM backends behind one batched protocol (:class:`LLM`, :func:`load_llm`),
the :class:`Agent`, the role prompt library, output parsers, the embedded
default model, :mod:`societas.agents.sandbox` for running untrusted code, and
:mod:`societas.agents.tools` for tools a model may call.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .agent import Agent, AgentReply, act_batch, format_answers, format_inputs
from .llm import (
    LLM,
    ChatMessage,
    Completion,
    FunctionLLM,
    LLMServerError,
    OpenAICompatibleLLM,
    Prompt,
    SamplingParams,
    UnknownLLM,
    Usage,
)
from .parsers import (
    answers_match,
    extract_code,
    extract_code_blocks,
    extract_final_answer,
    extract_yaml_block,
    normalize_answer,
    numeric_answer,
)
from .roles import CONDUCTOR_ROLES, ROLE_PROMPTS, canonical_role, known_roles, register_role, role_prompt
from .sandbox import Sandbox, SandboxResult, bwrap_available, run_python
from .tools import (
    ParsedReply,
    Tool,
    ToolArgumentError,
    ToolCall,
    ToolError,
    ToolExecutionError,
    ToolResult,
    assistant_tool_calls_message,
    calculator,
    parse_tool_calls,
    python_tool,
    run_tool_call,
    tool,
    tool_message,
    tool_results_message,
    tools_by_name,
    tools_system_prompt,
)

__all__ = [
    "Agent",
    "AgentReply",
    "act_batch",
    "format_answers",
    "format_inputs",
    "LLM",
    "ChatMessage",
    "Completion",
    "FunctionLLM",
    "LLMServerError",
    "OpenAICompatibleLLM",
    "Prompt",
    "SamplingParams",
    "TransformersLLM",
    "UnknownLLM",
    "Usage",
    "VLLMLLM",
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
    "ParsedReply",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolError",
    "ToolExecutionError",
    "ToolResult",
    "assistant_tool_calls_message",
    "calculator",
    "parse_tool_calls",
    "python_tool",
    "run_tool_call",
    "tool",
    "tool_message",
    "tool_results_message",
    "tools_by_name",
    "tools_system_prompt",
    "CONDUCTOR_ROLES",
    "ROLE_PROMPTS",
    "canonical_role",
    "known_roles",
    "register_role",
    "role_prompt",
]

if TYPE_CHECKING:  # what the lazy names are, for type checkers
    from .llm import VLLMLLM, TransformersLLM, load_llm

# The backends that import torch and transformers load on first use (see societas.agents.llm).
_LAZY = ("TransformersLLM", "VLLMLLM", "load_llm")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.llm"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
