"""Measured-data readers: the table contract, unit checks and README sanity figures."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse import data
from dse.errors import DataError
from dse.spec.hardware import gpu_names

AIC_GEMM = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/{gpu}/gemm/{engine}/{ver}"


@pytest.fixture(scope="module")
def tables(data_dir: Path) -> dict[str, pd.DataFrame]:
    return data.load(data_dir)


@pytest.mark.slow
def test_every_table_has_the_common_columns(tables: dict[str, pd.DataFrame]) -> None:
    for kind, df in tables.items():
        assert len(df) > 0, kind
        assert list(df.columns[: len(data.COMMON_COLUMNS)]) == list(data.COMMON_COLUMNS), kind
        assert (df["kind"] == kind).all()
        lat = df["latency_s"].to_numpy()
        assert np.isfinite(lat).all() and (lat > 0).all(), kind


@pytest.mark.slow
def test_aiconfigurator_kinds_present(tables: dict[str, pd.DataFrame]) -> None:
    for kind in ("gemm", "context_attention", "generation_attention", "moe", "allreduce"):
        df = tables[kind]
        got = df[df["source"] == "aiconfigurator"]
        assert {"h100_sxm", "h200_sxm", "a100_sxm"} <= set(got["gpu"]), kind


def _gemm_latency_ms(tables, gpu: str, engine: str, m: int, n: int, k: int) -> float:
    g = tables["gemm"]
    row = g[
        (g["source"] == "aiconfigurator")
        & (g["gpu"] == gpu)
        & (g["engine"] == engine)
        & (g["dtype"] == "bfloat16")
        & (g["m"] == m)
        & (g["n"] == n)
        & (g["k"] == k)
    ]
    assert len(row) == 1
    return float(row["latency_s"].iloc[0]) * 1e3


def test_readme_gemm_sanity_figures(tables: dict[str, pd.DataFrame]) -> None:
    # README: H100 bf16 GEMM 4096^3 = 0.166 ms (~828 TFLOP/s); m=1, n=k=8192 = 0.052 ms.
    big = _gemm_latency_ms(tables, "h100_sxm", "vllm", 4096, 4096, 4096)
    assert big == pytest.approx(0.166, rel=0.01)
    assert 2 * 4096**3 / (big / 1e3) == pytest.approx(828e12, rel=0.01)
    gemv = _gemm_latency_ms(tables, "h100_sxm", "vllm", 1, 8192, 8192)
    assert gemv == pytest.approx(0.052, rel=0.02)
    # weights dominate the bytes: 8192^2 x 2 bytes / 0.052 ms ~ 2.6 TB/s
    assert 8192 * 8192 * 2 / (gemv / 1e3) == pytest.approx(2.6e12, rel=0.03)


@pytest.mark.slow
def test_h200_energy_is_latency_times_power(tables: dict[str, pd.DataFrame]) -> None:
    for kind in ("gemm", "context_attention", "generation_attention", "moe"):
        df = tables[kind]
        h200 = df[(df["source"] == "aiconfigurator") & (df["gpu"] == "h200_sxm")]
        assert len(h200) > 0
        assert h200["power_w"].between(50, 800).all()
        np.testing.assert_allclose(h200["energy_j"], h200["latency_s"] * h200["power_w"])
        other = df[(df["source"] == "aiconfigurator") & (df["gpu"] != "h200_sxm")]
        assert other["power_w"].isna().all() and other["energy_j"].isna().all()


def test_main_gpus_use_registry_names(tables: dict[str, pd.DataFrame]) -> None:
    registry = set(gpu_names())
    g = tables["gemm"]
    aic = set(g.loc[g["source"] == "aiconfigurator", "gpu"])
    assert {"h100_sxm", "h200_sxm", "a100_sxm"} <= aic <= registry | {"b200_sxm"}
    # every aiconfigurator GPU is a registry name (B200 joined with issue 35)
    assert not any(c.isupper() or c == " " for name in aic for c in name)
    assert set(tables["layer_op"]["gpu"]) == {"a100_sxm", "h100_sxm", "a40"}
    assert set(tables["serving_energy"]["gpu"]) == {"h100_sxm", "a100_sxm_40gb"}
    assert set(tables["splitwise"]["gpu"]) == {"a100_sxm", "h100_sxm"}
    e2e = tables["e2e"]
    assert {"h100_sxm", "a100_sxm_40gb", "gh200"} <= set(e2e["gpu"])
    assert {"mi250", "mi300x"} <= set(e2e["gpu"])  # other vendors: lowercase slugs
    assert not e2e["gpu"].str.contains(r"[A-Z ]").any()


def test_generation_attention_kv_len_is_the_step_column(tables: dict[str, pd.DataFrame]) -> None:
    ga = tables["generation_attention"]
    assert (ga["isl"] == 1).all()
    # steps were collected as 2^j - 1 cached tokens
    assert {1, 3, 127, 131071} <= set(ga["kv_len"])


def _copy_one(src_root: Path, dst_root: Path, rel: str) -> Path:
    dst = dst_root / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src_root / rel, dst)
    return dst


def test_subset_folder_reads_only_what_is_there(data_dir: Path, tmp_path: Path) -> None:
    rel = AIC_GEMM.format(gpu="h100_sxm", engine="vllm", ver="0.24.0") + "/gemm_perf.parquet"
    _copy_one(data_dir, tmp_path, rel)
    got = data.load(tmp_path)
    assert list(got) == ["gemm"]
    assert set(got["gemm"]["file"]) == {rel}
    assert data.read_aiconfigurator(tmp_path / "nothing-here") == {}


def _write_gemm(tmp_path: Path, frame: pd.DataFrame) -> str:
    rel = AIC_GEMM.format(gpu="h100_sxm", engine="vllm", ver="9.9") + "/gemm_perf.parquet"
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    frame.to_parquet(path)
    return rel


def _gemm_frame(latency_ms: list[float]) -> pd.DataFrame:
    n = len(latency_ms)
    return pd.DataFrame(
        {
            "gemm_dtype": ["bfloat16"] * n,
            "m": [4096] * n,
            "n": [4096] * n,
            "k": [4096] * n,
            "latency": latency_ms,
        }
    )


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (_gemm_frame([0.166]).drop(columns="latency"), "missing column(s) latency"),
        (_gemm_frame([-0.166]), "latency must be a finite number > 0"),
        (_gemm_frame([float("nan")]), "latency must be a finite number > 0"),
        (_gemm_frame([0.166]).astype({"latency": str}).replace("0.166", "fast"), "cannot parse"),
        (_gemm_frame([166.0]), "wrong units"),  # microseconds written as milliseconds
        (_gemm_frame([0.000166]), "wrong units"),  # seconds written as milliseconds
    ],
)
def test_malformed_aiconfigurator_file_names_file_and_problem(
    tmp_path: Path, frame: pd.DataFrame, message: str
) -> None:
    rel = _write_gemm(tmp_path, frame)
    with pytest.raises(DataError) as err:
        data.load(tmp_path)
    assert rel in str(err.value)
    assert message in str(err.value)


def test_unreadable_parquet_is_a_data_error(tmp_path: Path) -> None:
    rel = AIC_GEMM.format(gpu="h200_sxm", engine="vllm", ver="0.1") + "/gemm_perf.parquet"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text("not parquet")
    with pytest.raises(DataError, match="cannot read parquet"):
        data.load(tmp_path)


def test_unknown_kind_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown data kind"):
        data.load(tmp_path, kinds=["gemm", "nope"])


# ---- vidur -------------------------------------------------------------------------------------


def test_vidur_layer_ops_are_melted_per_op(tables: dict[str, pd.DataFrame], data_dir: Path) -> None:
    ops = tables["layer_op"]
    f = "vidur/data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"
    one = ops[ops["file"] == f]
    raw = pd.read_csv(data_dir / f)
    expected_ops = {
        "emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
        "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add",
    }  # fmt: skip
    assert set(one["op"]) == expected_ops
    assert len(one) == len(raw) * len(expected_ops)
    # first CSV row, RMSNorm: median ms -> s, mean and std kept
    row0 = one[(one["row"] == 0) & (one["op"] == "input_layernorm")].iloc[0]
    assert row0["latency_s"] == pytest.approx(raw["time_stats.input_layernorm.median"][0] / 1e3)
    assert row0["latency_mean_s"] == pytest.approx(raw["time_stats.input_layernorm.mean"][0] / 1e3)
    assert row0["latency_std_s"] == pytest.approx(raw["time_stats.input_layernorm.std"][0] / 1e3)
    assert row0["model"] == "meta-llama/Llama-2-7b-hf"
    assert (row0["d_model"], row0["n_heads"], row0["d_ff"]) == (4096, 32, 11008)
    assert bool(row0["gated_mlp"])
    assert set(one["tensor_parallel"]) == {1, 2, 4, 8}
    # phi-2 has no post_attention_layernorm (parallel attention + MLP block)
    phi = ops[ops["model"] == "microsoft/phi-2"]
    assert "post_attention_layernorm" not in set(phi["op"])
    assert not phi["gated_mlp"].any()


def test_vidur_network_tables(tables: dict[str, pd.DataFrame]) -> None:
    ar = tables["allreduce"]
    v = ar[ar["source"] == "vidur"]
    assert set(v["op"]) == {"all_reduce", "send_recv"}
    assert set(v["implementation"]) >= {"h100_dgx", "a100_dgx", "h100_pairwise_nvlink"}
    assert v["message_bytes"].min() == 2048 and v["message_bytes"].max() >= 64 * 2**20
    assert {2, 4, 8} <= set(v.loc[v["op"] == "all_reduce", "n_gpus"])
    # a100_dgx has 16-GPU (two-node) all-reduce rows
    assert (v.loc[v["n_gpus"] == 16, "n_nodes"] == 2).all()


def test_aiconfigurator_allreduce_message_size_is_elements(tables: dict[str, pd.DataFrame]) -> None:
    # aiconfigurator's `message_size` counts elements of the table's dtype; message_bytes is
    # bytes. Evidence in the data: int8 rows of 2N elements take the time of float16 rows of N
    # (same bytes), and only the byte reading gives an 8-GPU NCCL bus rate near NVLink's.
    ar = tables["allreduce"]
    nccl = ar[(ar["source"] == "aiconfigurator") & (ar["implementation"] == "nccl")]
    nccl = nccl[(nccl["gpu"] == "h100_sxm") & (nccl["op"] == "all_reduce")]
    half = nccl[nccl["dtype"] == "float16"]
    i8 = nccl[nccl["dtype"] == "int8"]
    assert (half["message_bytes"] == 2 * half["message_elements"]).all()
    assert (i8["message_bytes"] == i8["message_elements"]).all()
    # messages of 64 MB and more, every GPU count: same bytes -> same time (int8 is up to 27%
    # slower on 8 GPUs; reading the counts as bytes would make it ~0.55x the float16 time)
    key = ["n_gpus", "message_bytes"]
    both = half.merge(i8, on=key, suffixes=("_h", "_i"))
    big = both[both["message_bytes"] >= 64 * 2**20]
    assert len(big) >= 6
    ratio = big["latency_s_i"] / big["latency_s_h"]
    assert ratio.between(0.95, 1.35).all(), ratio.tolist()
    # ring bus rate 2 (n-1)/n x bytes / time of the 8-GPU 512 MB row: 350-600 GB/s on H100
    top = half[(half["n_gpus"] == 8)].sort_values("message_bytes").iloc[-1]
    bus = 2 * 7 / 8 * top["message_bytes"] / top["latency_s"]
    assert 350e9 < bus < 600e9, bus
    custom = ar[(ar["source"] == "aiconfigurator") & (ar["implementation"] == "custom")]
    assert (custom["message_bytes"] == 2 * custom["message_elements"]).all()  # bfloat16


def test_aiconfigurator_allreduce_unknown_dtype_is_a_data_error(
    data_dir: Path, tmp_path: Path
) -> None:
    rel = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/h100_sxm/comm/nccl/2.29.2"
    src = data_dir / rel / "nccl_perf.parquet"
    raw = pd.read_parquet(src)
    raw["nccl_dtype"] = raw["nccl_dtype"].replace({"int8": "int3"})
    dst = tmp_path / rel
    dst.mkdir(parents=True)
    raw.to_parquet(dst / "nccl_perf.parquet")
    with pytest.raises(DataError, match=r"nccl_perf\.parquet.*int3"):
        data.read_aiconfigurator(tmp_path)


# ---- argonne -----------------------------------------------------------------------------------


def test_argonne_e2e_and_power(tables: dict[str, pd.DataFrame], data_dir: Path) -> None:
    e2e, en = tables["e2e"], tables["e2e_energy"]
    assert len(e2e) == 3142 and len(en) == 40
    raw = pd.read_csv(data_dir / "argonne/Plots/Fig_16_a_b/power_results.csv")
    np.testing.assert_allclose(en["power_w"], raw["avg_power"] / 1000.0)
    np.testing.assert_allclose(en["energy_j"], raw["Latency"] * raw["avg_power"] / 1000.0)
    assert en["power_w"].between(30, 1000).all()
    assert (e2e["input_tokens"] == e2e["output_tokens"]).all()
    assert set(e2e["engine"]) >= {"vllm", "trtllm", "llama.cpp"}
    # throughput counts input + output tokens of the whole batch, except llama.cpp batches
    ok = e2e[e2e["throughput_counts_batch"]]
    np.testing.assert_allclose(
        ok["throughput_tok_s"],
        ok["batch_size"] * (ok["input_tokens"] + ok["output_tokens"]) / ok["latency_s"],
        rtol=0.02,
    )
    assert set(e2e.loc[~e2e["throughput_counts_batch"], "engine"]) == {"llama.cpp"}


# ---- ml-energy, splitwise, llmcompass ----------------------------------------------------------


def test_ml_energy_serving_rows(tables: dict[str, pd.DataFrame]) -> None:
    se = tables["serving_energy"]
    assert len(se) == 314 and set(se["task"]) == {"chat", "code"}
    np.testing.assert_allclose(
        se["energy_per_output_token_j"], se["energy_per_request_j"] / se["avg_output_tokens"]
    )
    assert se["latency_s"].between(0.01, 1.0).all()  # average TPOT in seconds
    mix = se[se["file"].str.endswith("Mixtral-8x22B-Instruct-v0.1/bs32+tp8+pp2.json")]
    assert (
        mix.iloc[0]["n_gpus"] == 16
        and mix.iloc[0]["model"] == "mistralai/Mixtral-8x22B-Instruct-v0.1"
    )
    assert se["power_per_gpu_w"].between(30, 1000).all()


def test_splitwise_rows_in_seconds(tables: dict[str, pd.DataFrame], data_dir: Path) -> None:
    sw = tables["splitwise"]
    raw = pd.read_csv(data_dir / "splitwise/data/perf_model.csv")
    assert len(sw) == len(raw)
    np.testing.assert_allclose(sw["token_time_s"], raw["token_time"] / 1e3)
    np.testing.assert_allclose(sw["latency_s"], sw["e2e_time_s"])
    # e2e ~ prefill + (output - 1) decode steps, within 5% for the median configuration
    est = sw["prompt_time_s"] + (sw["output_tokens"] - 1) * sw["token_time_s"]
    assert float((est / sw["e2e_time_s"]).median()) == pytest.approx(1.0, abs=0.05)
    assert sw["power_w"].isna().all()
    assert sw.loc[sw["gpu"] == "h100_sxm", "average_power_norm"].isna().all()
    assert sw.loc[sw["hardware"] == "h100-80gb-pcap", "power_capped"].all()


def test_llmcompass_tables(tables: dict[str, pd.DataFrame]) -> None:
    g = tables["gemm"]
    lc = g[g["source"] == "llmcompass"]
    assert len(lc) == 20 and (lc["gpu"] == "a100_sxm").all()
    row = lc[(lc["m"] == 64) & (lc["n"] == 12288)].iloc[0]
    assert row["latency_s"] == pytest.approx(0.19e-3)
    for kind in ("softmax", "layernorm", "gelu"):
        t = tables[kind]
        np.testing.assert_allclose(t["latency_s"], t["elements"] / t["throughput_elements_per_s"])
    ln = tables["layernorm"]
    # 4096 x 32 at 2.476 G elements/s -> 52.9 us
    first = ln[(ln["m"] == 4096) & (ln["n"] == 32)].iloc[0]
    assert first["latency_s"] == pytest.approx(4096 * 32 / 2.476377540036036e9)


# ---- malformed files of other sources ----------------------------------------------------------


def _write(root: Path, rel: str, text: str) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return rel


ARGONNE_HEADER = (
    "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput"
)


@pytest.mark.parametrize(
    ("rel", "text", "message"),
    [
        (
            "argonne/Plots/All_results.csv",
            "Hardware,Framework,Model\nNvidia H100 GPU,vLLM,m\n",
            "missing column(s) Num of Hardware",
        ),
        (
            "argonne/Plots/All_results.csv",
            ARGONNE_HEADER + "\nNvidia H100 GPU,1,vLLM,m,128,1,-2.0,100\n",
            "Latency must be a finite number > 0",
        ),
        (
            "argonne/Plots/Fig_16_a_b/power_results.csv",
            ARGONNE_HEADER + ",avg_power\nNvidia H100 GPU,1,vLLM,m,128,1,2.0,128,350\n",
            "avg_power (W, after mW -> W) must lie in [30, 1000]",  # watts written as mW
        ),
        (
            "vidur/data/profiling/compute/h100/org/model/mlp.csv",
            "time_stats.add.median,n_head,n_kv_head,n_embd,num_tokens\n0.01,8,8,1024,16\n",
            "missing column(s) num_tensor_parallel_workers",
        ),
        (
            "vidur/data/profiling/compute/h100/org/model/mlp.csv",
            "time_stats.add.median,n_head,n_kv_head,n_embd,num_tokens,num_tensor_parallel_workers"
            "\n-0.01,8,8,1024,16,1\n",
            "time_stats.add.median must be > 0",
        ),
        (
            "vidur/data/profiling/compute/h100/org/model/mlp.csv",
            "time_stats.add.median,time_stats.add.mean,n_head,n_kv_head,n_embd,num_tokens,"
            "num_tensor_parallel_workers\n,0.01,8,8,1024,16,1\n",
            "time_stats.add.median is empty at row 0",
        ),
        (
            "vidur/data/profiling/network/h100_dgx/all_reduce.csv",
            "time_stats.all_reduce.median,num_workers,size\nabc,2,2048\n",
            "cannot parse 'abc'",
        ),
        (
            "ml-energy-v2/data/llm_text_generation/chat/H100 80GB HBM3/o/m/bs8+tp1+pp1.json",
            '{"Model": "o/m", "GPU": "NVIDIA H100 80GB HBM3"}',
            "missing key(s) TP",
        ),
        (
            "ml-energy-v2/data/llm_text_generation/chat/H100 80GB HBM3/o/m/bs8+tp1+pp1.json",
            "{not json",
            "cannot parse JSON",
        ),
        (
            "splitwise/data/perf_model.csv",
            "model,hardware,prompt_size,batch_size,token_size,prompt_time,token_time,e2e_time,"
            "tensor_parallel\nllama2-70b,a100-80gb,512,1,128,0.2,0.055,7.2,2\n",
            "token_time (s, after ms -> s) must lie in",  # seconds written where ms belong
        ),
        (
            "llmcompass/ae/figure5/ab/real_hardware/matmul_A100.csv",
            "64, 12288, 12288, 0.1900us, 101.7124Tflops\n",
            "cannot parse '0.1900us' as a number in ms",
        ),
        (
            "llmcompass/ae/figure5/de/real_hardware/layernorm_A100.csv",
            "4096, 32\n",
            "expected 3 columns for layernorm, got 2",
        ),
    ],
)
def test_malformed_files_name_file_and_problem(
    tmp_path: Path, rel: str, text: str, message: str
) -> None:
    _write(tmp_path, rel, text)
    with pytest.raises(DataError) as err:
        data.load(tmp_path)
    assert rel in str(err.value)
    assert message in str(err.value)


def test_vidur_attention_table_is_read_as_layer_ops(tmp_path: Path) -> None:
    # vidur's attention.csv layout (absent from the training share): decode rows carry no
    # attn_prefill time, and those (row, op) pairs are dropped rather than read as NaN latency.
    header = (
        "time_stats.attn_prefill.median,time_stats.attn_decode.median,"
        "time_stats.attn_kv_cache_save.median,n_embd,n_q_head,n_kv_head,block_size,"
        "num_tensor_parallel_workers,max_model_len,batch_size,prefill_chunk_size,kv_cache_size,"
        "is_prefill,attention_backend"
    )
    rows = [
        "0.5,,0.01,4096,32,8,16,1,4096,1,512,0,True,FLASHINFER",
        ",0.05,0.01,4096,32,8,16,1,4096,8,0,1024,False,FLASHINFER",
    ]
    rel = _write(
        tmp_path,
        "vidur/data/profiling/compute/h100/meta-llama/Meta-Llama-3-8B/attention.csv",
        header + "\n" + "\n".join(rows) + "\n",
    )
    got = data.read_vidur(tmp_path)["layer_op"]
    assert set(got["file"]) == {rel}
    assert sorted(got["op"]) == [
        "attn_decode",
        "attn_kv_cache_save",
        "attn_kv_cache_save",
        "attn_prefill",
    ]
    prefill = got[got["op"] == "attn_prefill"].iloc[0]
    assert prefill["latency_s"] == pytest.approx(0.5e-3)
    assert (prefill["n_heads"], prefill["prefill_chunk_size"], prefill["is_prefill"]) == (
        32,
        512,
        True,
    )


def test_each_source_alone(data_dir: Path, tmp_path: Path) -> None:
    """A folder holding one source yields only that source's kinds."""
    _copy_one(data_dir, tmp_path, "splitwise/data/perf_model.csv")
    _copy_one(data_dir, tmp_path, "llmcompass/ae/figure5/g/real_hardware/gelu_A100.csv")
    got = data.load(tmp_path)
    assert sorted(got) == ["gelu", "splitwise"]
    assert data.load(tmp_path, kinds=["gelu"]).keys() == {"gelu"}
    for reader in ("read_vidur", "read_argonne", "read_ml_energy", "read_aiconfigurator"):
        assert getattr(data, reader)(tmp_path) == {}


@pytest.mark.slow
def test_kinds_filter_matches_the_full_read(
    data_dir: Path, tables: dict[str, pd.DataFrame]
) -> None:
    got = data.load(data_dir, kinds=["gemm", "layer_op"])
    assert sorted(got) == ["gemm", "layer_op"]
    pd.testing.assert_frame_equal(got["gemm"], tables["gemm"])
    for source, kinds in data.SOURCE_KINDS.items():
        assert kinds <= set(data.KINDS), source


# ---- held-out folders: empty files, other layouts and spellings (H7 stress test) --------------


def test_empty_files_are_skipped_not_errors(data_dir: Path, tmp_path: Path) -> None:
    """A held-out share filtered by shape or model can leave a file with a header and no rows:
    no measurements, not a malformed file. The other files of the folder are still read."""
    _write(tmp_path, "argonne/Plots/All_results.csv", ARGONNE_HEADER + "\n")
    _write(tmp_path, "splitwise/data/perf_model.csv", "model,hardware,prompt_size\n")
    _write(tmp_path, "vidur/data/profiling/compute/h100/org/model/mlp.csv", "n_head,n_embd\n")
    _write(tmp_path, "vidur/data/profiling/network/h100_dgx/all_reduce.csv", "")
    _write(tmp_path, "llmcompass/ae/figure5/ab/real_hardware/matmul_A100.csv", "")
    empty = AIC_GEMM.format(gpu="h100_sxm", engine="vllm", ver="9.9") + "/gemm_perf.parquet"
    (tmp_path / empty).parent.mkdir(parents=True)
    _gemm_frame([]).to_parquet(tmp_path / empty)
    kept = _copy_one(data_dir, tmp_path, "argonne/Plots/Fig_16_a_b/power_results.csv")
    got = data.load(tmp_path)
    assert sorted(got) == ["e2e_energy"]
    assert len(got["e2e_energy"]) == len(pd.read_csv(kept))


def test_aiconfigurator_table_without_op_folder(tmp_path: Path) -> None:
    # upstream also writes systems/data/<gpu>/<engine>/<version>/<table>.parquet
    rel = (
        "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/h100_sxm/sglang/0.5.10/"
        "gemm_perf.parquet"
    )
    (tmp_path / rel).parent.mkdir(parents=True)
    _gemm_frame([0.166]).to_parquet(tmp_path / rel)
    got = data.load(tmp_path)["gemm"]
    assert (got["gpu"].iloc[0], got["engine"].iloc[0], got["engine_version"].iloc[0]) == (
        "h100_sxm",
        "sglang",
        "0.5.10",
    )


def test_vidur_new_model_and_cluster_folders(data_dir: Path, tmp_path: Path) -> None:
    """New model folders (with or without <org>) and upstream's a100_pair_nvlink spelling of
    the pairwise-NVLink cluster are found and named like the training share's."""
    base = "vidur/data/profiling"
    src = f"{base}/compute/a100/microsoft/phi-2/mlp.csv"
    for rel in (f"{base}/compute/a100/newco/New-13b/mlp.csv", f"{base}/compute/h100/phi-2/mlp.csv"):
        (tmp_path / rel).parent.mkdir(parents=True)
        shutil.copyfile(data_dir / src, tmp_path / rel)
    net = f"{base}/network/a100_pair_nvlink/all_reduce.csv"
    (tmp_path / net).parent.mkdir(parents=True)
    shutil.copyfile(
        data_dir / f"{base}/network/a100_pairwise_nvlink/all_reduce.csv", tmp_path / net
    )
    got = data.load(tmp_path)
    ops = got["layer_op"]
    assert set(ops["model"]) == {"newco/New-13b", "phi-2"}
    assert set(ops["gpu"]) == {"a100_sxm", "h100_sxm"}
    ar = got["allreduce"]
    assert set(ar["implementation"]) == {"a100_pairwise_nvlink"} and set(ar["gpu"]) == {"a100_sxm"}


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        ("NVIDIA H200 141GB HBM3e", "h200_sxm"),
        ("H100 SXM5 80GB", "h100_sxm"),
        ("NVIDIA A100 40GB", "a100_sxm_40gb"),
        ("GH200 480GB", "gh200"),
        ("H100 PCIe", "h100_pcie"),  # another part: its own slug, not the SXM registry entry
        ("B200", "b200"),
    ],
)
def test_new_gpu_spellings(name: str, gpu: str) -> None:
    assert data.normalise_gpu(name) == gpu


def test_unit_checks_accept_gpus_beyond_the_training_share(tmp_path: Path) -> None:
    """Sanity bounds catch a unit slip (1000x), not a faster part: an H100 LLMCompass matmul at
    687 TFLOP/s (the old bound was the A100's), a B200 table at 950 W board power."""
    _write(
        tmp_path,
        "llmcompass/ae/figure5/ab/real_hardware/matmul_H100.csv",
        "8192, 8192, 8192, 1.6000ms, 687.1948Tflops\n",
    )
    rel = AIC_GEMM.format(gpu="b200_sxm", engine="trtllm", ver="1.2.0rc5") + "/gemm_perf.parquet"
    (tmp_path / rel).parent.mkdir(parents=True)
    _gemm_frame([0.07]).assign(power=[950.0]).to_parquet(tmp_path / rel)
    got = data.load(tmp_path)["gemm"].set_index("source")
    assert got.loc["llmcompass", "gpu"] == "h100_sxm"
    assert got.loc["aiconfigurator", "gpu"] == "b200_sxm"
    assert got.loc["aiconfigurator", "energy_j"] == pytest.approx(0.07e-3 * 950.0)


def test_a_few_rows_above_the_peak_do_not_reject_a_table(tmp_path: Path) -> None:
    """Upstream tables of the share's commit have a few rows above the registry peak (e.g. KV
    caches resident in L2); the file is read. A unit slip moves every row and is still caught
    (test_malformed_aiconfigurator_file_names_file_and_problem)."""
    frame = _gemm_frame([0.166] * 19 + [1e-4])
    frame.loc[19, ["m", "n", "k"]] = 2048  # 2 * 2048^3 FLOP in 0.1 us: 170 PFLOP/s
    _write_gemm(tmp_path, frame)
    assert len(data.load(tmp_path)["gemm"]) == 20
