"""`tritonllm openai`: the OpenAI frontend, the `openai` container of a serving pod.

Reads the FrontendConfig the operator rendered (JSON, `--config`), loads the model's tokenizer
and chat template, and serves OpenAI's API on the config's port in front of the tritonserver
beside it (tritonllm.openai). A config or tokenizer that is missing or invalid is a clear error
and exit code 2, before anything listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

DRAIN_SECONDS = 25.0  # within Kubernetes' default 30 s grace


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("openai", help="serve the OpenAI API in front of Triton (sidecar)",
                            description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path,
                        help="the FrontendConfig JSON (the plan volume's openai.json)")
    parser.add_argument("--bind", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--drain-seconds", type=float, default=DRAIN_SECONDS,
                        help="on SIGTERM, how long requests in flight may still take")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the verb list is built without the `openai` extra's packages.
    from pydantic import ValidationError

    from tritonllm.openai.chat import ChatTemplate, TemplateError, find_template
    from tritonllm.openai.server import Frontend, serve
    from tritonllm.openai.tokens import ModelTokenizer, TokenizerError
    from tritonllm.openai.triton import TritonClient
    from tritonllm.triton.openai import FrontendConfig

    try:
        config = FrontendConfig.model_validate(json.loads(args.config.read_text()))
    except (OSError, ValueError, ValidationError) as exc:
        print(f"error: tritonllm openai: cannot read the config {args.config}: {exc}",
              file=sys.stderr)
        return 2
    try:
        tokenizer = ModelTokenizer.load(config.tokenizer_dir)
        source = find_template(config.chat_template, Path(config.tokenizer_dir),
                               tokenizer.config)
        template = None if source is None else ChatTemplate(source, tokenizer.bos_token,
                                                            tokenizer.eos_token)
    except (TokenizerError, TemplateError, OSError) as exc:
        print(f"error: tritonllm openai: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if template is None:
        logging.getLogger("tritonllm.openai").warning(
            "model %s has no chat template: /v1/chat/completions answers 400",
            config.served_model_name)

    async def main() -> None:
        await serve(Frontend(config, tokenizer, template, TritonClient(config)), args.bind,
                    args.drain_seconds)

    asyncio.run(main())
    return 0
