"""Types every task payload shares: identifiers, groups, path patterns, and the error result."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, StringConstraints, ValidationError, field_validator

Ident = Annotated[str, StringConstraints(min_length=1, max_length=512, strip_whitespace=True)]
Group = Annotated[str, StringConstraints(min_length=1, max_length=256, strip_whitespace=True)]
Pattern = Annotated[str, StringConstraints(max_length=1024)]


class ErrorResult(BaseModel):
    """What a task returns for a payload it cannot accept: the worker stays up."""

    ok: Literal[False] = False
    error: str
    detail: Any = None

    @field_validator("detail")
    @classmethod
    def _json_safe(cls, v: Any) -> Any:
        """Validation errors carry exception objects in ``ctx``: a result must stay JSON-serializable."""
        return json.loads(json.dumps(v, default=str))

    @classmethod
    def invalid_payload(cls, exc: ValidationError) -> dict:
        """The result of a task whose payload failed validation (input values left out: they may be huge)."""
        return cls(
            error="invalid payload", detail=exc.errors(include_url=False, include_input=False)
        ).model_dump()
