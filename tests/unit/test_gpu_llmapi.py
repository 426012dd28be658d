"""The pure parts of the GPU recipe's llmapi stack (tests/gpu/llmapi.py; it runs on GPU machines
only) and of its SIMULATED LLM API (tests/triton/standin/llmapi_gpu_standin.py, the proxy side,
which needs no torch): argument checks as the real LLM API makes them, how a request's result is
consumed (streaming, final, async, stop strings, abort), the KV slot count, the margin rule the
answers are compared with, the adapted argv, and `tritonllm bench`'s llmapi request tensors."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.llmapi import adapted_argv, agreement, copy_simulated, ids_of
from tests.triton.stack import TritonInstall
from tritonllm.cli import bench

sys.path.insert(0, str(Path(__file__).parent.parent / "triton" / "standin"))
import llmapi_gpu_standin as standin


class FakeLLM:
    """What a RequestOutput asks of its LLM: detokenize, abort, forget."""

    def __init__(self) -> None:
        self.aborted: list[int] = []
        self.forgotten: list[int] = []

    def _decode(self, ids: list[int], params: Any) -> str:
        return " ".join(f"t{i}" for i in ids)

    def _abort(self, request_id: int) -> None:
        self.aborted.append(request_id)

    def _forget(self, request_id: int) -> None:
        self.forgotten.append(request_id)


def step(tokens: list[int], finished: bool = False, reason: str | None = None) -> dict[str, Any]:
    return {"tokens": tokens, "logprobs": [-0.5] * len(tokens), "finished": finished,
            "reason": reason}


def result(streaming: bool, **params: Any) -> tuple[standin.RequestOutput, FakeLLM]:
    llm = FakeLLM()
    out = standin.RequestOutput(llm, 7, "p", [1, 5], standin.SamplingParams(**params), streaming)
    return out, llm


def test_llm_args_refuse_an_unknown_key_as_the_real_llm_does() -> None:
    with pytest.raises(ValueError, match=r"^LLM got invalid argument: no_such_key$"):
        standin.check_llm_args({"model": "/m", "no_such_key": 1})
    with pytest.raises(ValueError, match="model\n  Field required"):
        standin.check_llm_args({"tokenizer": "/t"})
    # quant_config is TrtLlmArgs', not an argument of the PyTorch backend's LLM.
    with pytest.raises(ValueError, match="invalid argument: quant_config"):
        standin.check_llm_args({"model": "/m", "quant_config": {}})


def test_llm_args_take_config_dicts_and_refuse_unknown_config_fields() -> None:
    args = standin.check_llm_args({"model": "/m", "kv_cache_config": {
        "free_gpu_memory_fraction": 0.8, "enable_block_reuse": False},
        "scheduler_config": {"capacity_scheduler_policy": "MAX_UTILIZATION"}})
    assert args["kv_cache_config"].free_gpu_memory_fraction == 0.8
    assert args["scheduler_config"].capacity_scheduler_policy == "MAX_UTILIZATION"
    with pytest.raises(ValueError, match="free_gpu_mem_fraction\n  Extra inputs are not "
                       "permitted"):
        standin.check_llm_args({"model": "/m", "kv_cache_config": {"free_gpu_mem_fraction": 1}})


def test_the_table_beside_the_module_wins(tmp_path: Path) -> None:
    (tmp_path / standin.ARGS_TABLE).write_text(
        '{"classes": {"LLM": ["model", "only_here"]}, "nested": {}}')
    table = standin.args_table(tmp_path)
    assert set(standin.check_llm_args({"model": "/m", "only_here": 1}, table)) == {
        "model", "only_here", "kv_cache_config", "scheduler_config"}
    with pytest.raises(ValueError, match="invalid argument: tokenizer"):
        standin.check_llm_args({"model": "/m", "tokenizer": "/t"}, table)


@pytest.mark.parametrize("version", ["1.0.0", "1.2.1"])
def test_the_rendered_model_yaml_keys_are_llm_arguments(version: str) -> None:
    import json

    from tests.helpers import example
    from tritonllm.triton.repository import llmapi_config

    dep = example("llmapi-llama3-8b")
    keys = dict(llmapi_config(dep.spec, "/m", "/t"))
    keys.pop("triton_config")
    root = Path(__file__).parent.parent / "contract" / "tables"
    table = json.loads((root / f"llm_args-{version}.json").read_text())
    assert set(standin.check_llm_args(keys, table)) == set(keys)


def test_sampling_params_are_the_real_keyword_only_dataclass() -> None:
    with pytest.raises(TypeError, match="max_new_tokens"):
        standin.SamplingParams(max_new_tokens=3)
    with pytest.raises(TypeError):
        standin.SamplingParams(8)  # type: ignore[misc]
    p = standin.SamplingParams()
    assert (p.max_tokens, p.exclude_input_from_output, p.temperature) == (32, True, None)
    assert p.wire(2)["greedy"] and p.wire(2)["end_id"] == 2
    sampled = standin.SamplingParams(temperature=0.7, top_k=5, seed=3).wire(2)
    assert not sampled["greedy"] and (sampled["top_k"], sampled["seed"]) == (5, 3)
    assert standin.SamplingParams(ignore_eos=True).wire(2)["end_id"] is None


def test_sampling_params_and_completion_output_are_the_cpu_stand_ins() -> None:
    from tests.gpu.llmapi import SIMULATED

    assert standin.simulated_root() == SIMULATED
    assert Path(sys.modules[standin.CompletionOutput.__module__].__file__ or "").parent == (
        SIMULATED / "executor")
    with pytest.raises(ValueError, match="Greedy decoding"):  # the real SamplingParams' checks
        standin.SamplingParams(n=2)
    assert standin.SamplingParams(end_id=2).pad_id == 2


def test_deployed_the_simulated_parts_are_found_beside_the_module(tmp_path: Path) -> None:
    copy_simulated(tmp_path)
    root = standin.simulated_root(tmp_path)
    assert root == tmp_path / standin.SIMULATED
    assert (root / "sampling_params.py").exists() and (root / "executor" / "result.py").exists()


def test_streaming_result_yields_every_step_with_its_diff() -> None:
    out, llm = result(True)
    out._push(step([10]))
    out._push(step([11]))
    out._push(step([12], True, "length"))
    seen = [(o.outputs[0].text_diff, o.outputs[0].token_ids_diff) for o in out]
    assert seen == [("t10", [10]), (" t11", [11]), (" t12", [12])]
    assert out.finished and out.outputs[0].finish_reason == "length"
    assert out.outputs[0].cumulative_logprob == pytest.approx(-1.5)
    assert llm.forgotten == [7]


def test_a_final_result_is_seen_once_whole() -> None:
    out, _ = result(False)
    for tokens in ([10], [11]):
        out._push(step(tokens))
    out._push(step([], True, "stop"))
    assert [o.outputs[0].token_ids for o in out] == [[10, 11]]
    assert out.result().outputs[0].text == "t10 t11"
    assert out.outputs[0].finish_reason == "stop"


def test_async_iteration_and_aresult_wake_on_steps_from_another_thread() -> None:
    async def consume() -> list[str]:
        out, _ = result(True)
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, out._push, step([3]))
        loop.call_later(0.02, out._push, step([4], True, "length"))
        texts = [o.outputs[0].text async for o in out]
        assert (await out.aresult()).finished
        return texts

    assert asyncio.run(consume()) == ["t3", "t3 t4"]


def test_a_stop_string_ends_the_request_and_is_not_returned() -> None:
    out, llm = result(False, stop=["t12"])
    out._push(step([10, 12, 13]))
    final = out.result()
    assert final.outputs[0].text == "t10 "
    assert (final.outputs[0].finish_reason, final.outputs[0].stop_reason) == ("stop", "t12")
    assert llm.aborted == [7]


def test_kv_slots_fit_the_fraction_of_free_memory_and_the_batch() -> None:
    assert standin.fits(80 * 2**30, 0.5, 2**30, 64) == 40
    assert standin.fits(80 * 2**30, 0.9, 2**30, 16) == 16
    assert standin.fits(2**29, 0.9, 2**30, 16) == 0


def test_agreement_stops_only_where_the_reference_was_unsure() -> None:
    ref, margins = [5, 6, 7, 8], [1.0, 1.0, 0.01, 1.0]
    assert agreement([5, 6, 7, 8], ref, margins, 0.25) == (4, None)
    assert agreement([5, 6, 9, 9], ref, margins, 0.25) == (2, None)  # a near tie: may differ
    upto, problem = agreement([5, 9, 7, 8], ref, margins, 0.25)
    assert upto == 1 and problem is not None and "margin 1.000" in problem
    assert agreement([5, 6], [5, 6, 2, 4], margins, 0.25) == (2, None)  # stopped at the end id
    assert agreement([5, 6], ref, margins, 0.25)[1] == "2 tokens, reference 4"


def test_served_text_maps_back_to_ids_one_word_a_token() -> None:
    assert ids_of("w40 fox w40", {"w40": 40, "fox": 28}) == [40, 28, 40]


def test_adapted_argv_changes_only_binary_repository_and_ports(tmp_path: Path) -> None:
    install = TritonInstall(tmp_path / "py", tmp_path, tmp_path / "bin/tritonserver",
                            tmp_path / "backends", {})
    argv = ["/opt/tritonserver/bin/tritonserver", "--model-repository=/store/repo",
            "--disable-auto-complete-config", "--http-port=8000", "--grpc-port=8001",
            "--metrics-port=8002", "--allow-metrics=true"]
    out = adapted_argv(argv, install, tmp_path / "repo", (1, 2, 3))
    assert out[:7] == [str(tmp_path / "bin/tritonserver"), f"--model-repository={tmp_path}/repo",
                       "--disable-auto-complete-config", "--http-port=1", "--grpc-port=2",
                       "--metrics-port=3", "--allow-metrics=true"]
    assert out[7:] == [f"--backend-directory={tmp_path}/backends", "--http-address=127.0.0.1",
                       "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]


def test_bench_sends_llmapi_inputs_to_the_llmapi_model() -> None:
    import tritonclient.grpc as grpcclient

    llmapi = bench._inputs(grpcclient, bench.Load(model="tensorrt_llm", llmapi=True), True)
    assert [(t.name(), t.shape(), t.datatype()) for t in llmapi] == [
        ("text_input", [1], "BYTES"), ("sampling_param_max_tokens", [1], "INT32"),
        ("streaming", [1], "BOOL")]
    ensemble = bench._inputs(grpcclient, bench.Load(), False)
    assert [(t.name(), t.shape()) for t in ensemble] == [
        ("text_input", [1, 1]), ("max_tokens", [1, 1]), ("stream", [1, 1])]


def test_cuda_graphs_are_on_by_default_and_off_when_the_config_is_null() -> None:
    assert standin.graph_batch({"model": "/m"}) == 128
    assert standin.graph_batch({"model": "/m", "cuda_graph_config": {"max_batch_size": 16}}) == 16
    assert standin.graph_batch({"model": "/m", "cuda_graph_config": None}) == 0


def test_new_prompts_are_prefilled_in_groups_within_max_num_tokens() -> None:
    prompts = [(0, [1] * 3), (1, [1] * 5), (2, [1] * 2), (3, [1] * 9)]
    assert [[slot for slot, _ in g] for g in standin.groups(prompts, 10)] == [[0, 1], [2], [3]]
    assert [[slot for slot, _ in g] for g in standin.groups(prompts, 100)] == [[0, 1, 2, 3]]
    assert standin.groups([(0, [1] * 50)], 10) == [[(0, [1] * 50)]]  # longer: alone


def test_a_request_ends_at_its_end_id_stop_tokens_max_tokens_or_max_seq_len() -> None:
    params = standin.SamplingParams(max_tokens=4, stop_token_ids=[9]).wire(2)
    assert standin.finish_reason(params, 2, 1, 6, 100) == "stop"  # the end id
    assert standin.finish_reason(params, 9, 1, 6, 100) == "stop"
    assert standin.finish_reason(params, 5, 4, 9, 100) == "length"  # max_tokens
    assert standin.finish_reason(params, 5, 2, 100, 100) == "length"  # max_seq_len
    assert standin.finish_reason(params, 5, 2, 7, 100) is None
    ignoring = standin.SamplingParams(ignore_eos=True).wire(2)
    assert standin.finish_reason(ignoring, 2, 1, 6, 100) is None


def test_sampling_knobs_turn_greedy_decoding_off() -> None:
    assert standin.SamplingParams().wire(2)["greedy"]
    assert standin.SamplingParams(top_k=1, temperature=0.8).wire(2)["greedy"]
    assert standin.SamplingParams(temperature=0.0).wire(2)["greedy"]
    assert not standin.SamplingParams(top_k=5).wire(2)["greedy"]
    assert not standin.SamplingParams(top_p=0.9).wire(2)["greedy"]
