"""Inference precision of a loaded torch model: ``float32`` | ``bf16`` | ``int8``.

:func:`set_precision` is the one switch behind :class:`~muppets.transfer.predict.Predictor`
(``precision=``), ``muppets evaluate --precision`` and ``muppets serve --precision`` (encoders
and task models alike), so offline and served predictions run the same layers:

=========  ================================================================================
precision  what changes (embeddings, layer norms, softmax and the residual stream stay float32)
=========  ================================================================================
float32    nothing
bf16       every ``nn.Linear`` becomes a :class:`Bf16Linear`: weights cast to bf16 once,
           inputs cast to bf16 and padded to :func:`bucket_rows` rows. Fast only on CPUs with
           native bf16 (AVX512-BF16, AMX); elsewhere emulated and slower (a warning says so)
int8       dynamic quantization (``torch.ao.quantization.quantize_dynamic``) of every
           ``nn.Linear`` into an :class:`Int8Linear`: weights stored as int8 (7 bits) with one
           scale per output row; at each call every token's input row is quantized to 8 bits
           with its own scale, the matmul runs in integers (fbgemm / x86 kernels) and the
           output comes back in float32
=========  ================================================================================

**Which int8** (chosen by the cosine of MiniLM's sentence vectors to float32's; the dev-score
change each precision makes is measured by ``benchmarks/int8_speed.py``, results in the manual's
distillation page):

- weights: **one scale per output row** (per channel), not one per matrix. Rows of a trained
  layer have different ranges, and one scale for the whole matrix is set by its largest weight,
  which leaves the other rows few levels;
- activations: **one scale per token** (per input row), not one per call. torch's dynamic
  ``Linear`` reads one range from the whole input, i.e. from every token of the batch: a
  sentence's outputs then change with the sentences it is batched with (and with their
  padding), so a served request, batched with whatever arrived with it, could get another label
  than the same sentence offline. The fbgemm kernel has no per-row input scales, so
  :class:`Int8Linear` gives it rows that all share one range: each row is divided by its
  largest absolute value, two constant rows ``(1, 0, …)`` and ``(-1, 0, …)`` are appended so the
  kernel's range is always exactly [-1, 1], and the output rows are multiplied back (bias added
  after). A token's output then depends on that token's input row alone, whatever else is in
  the call: the integer matmul is exact and the rest is row-wise. It also leaves fewer levels
  unused (a row with small values gets its own fine scale), and costs four row-wise passes per
  call (the speed it costs is on the manual's distillation page);
- activations: **all 8 bits**, where torch's dynamic ``Linear`` passes ``reduce_range=True``
  (7 bits) on x86;
- weights **7 bits** (the weight observer's range -64 … 63; symmetric scales reach ±64). AVX2 CPUs
  without VNNI multiply u8 activations by s8 weights in pairs summed in 16 bits
  (``vpmaddubsw``), which saturates when both are near full range (2 x 255 x 127 > 32767); with
  7-bit weights it cannot (2 x 255 x 64 < 32767). onnxruntime's quantizer makes the same choice
  (its ``reduce_range``).

**Batches**: a token's int8 output does not depend on the other tokens of the call, so
batching changes a sentence's int8 outputs only as much as it changes its float32 ones (the
attention over a padded batch sums in another order; once in a while that float rounding moves
a value across an edge of the 8-bit grid): a served label can differ from the offline one only
where the two classes are all but tied. ONNX int8 graphs (onnxruntime's
``DynamicQuantizeLinear``) still read one range per call.

The quantized layers are :class:`Int8Linear` (``torch.ao.nn.quantized.dynamic.Linear``) modules in place of the
``nn.Linear`` ones, so every call of them (``layer(x)``, also through
:func:`muppets.nn.decode.linear`, which calls ``layer(x)`` outside a GPT decode session) runs
the int8 kernel. GPT decoding's transposed weight copies (:class:`muppets.nn.decode.DecodeWeights`)
read ``layer.weight`` and do not exist for quantized layers, which is why language models are
not offered int8 (:func:`check_precision`).

torch marks its quantized tensor types deprecated (a warning at conversion, silenced here,
points to torchao); the kernels are there in the torch muppets pins, and the tests check that
the layers are quantized and their outputs close to float32's.

The ONNX counterpart is :func:`muppets.interop.onnx_export.quantize_export` (onnxruntime's
``quantize_dynamic`` on the exported graph).
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

from muppets.errors import ConfigError

log = logging.getLogger(__name__)

PRECISIONS = ("float32", "bf16", "int8")
INT8_NOTE = ("precision int8: dynamic quantization of the linear layers (int8 weights, one scale per output row; "
             "inputs quantized with one scale per token); embeddings, layer norms and attention softmax stay float32")


def check_precision(precision: str, what: str = "") -> None:
    """A :class:`ConfigError` unless ``precision`` is one of :data:`PRECISIONS`."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}" + (f" ({what})" if what else ""))


def set_precision(model: nn.Module, precision: str) -> nn.Module:
    """``model`` (eval mode, on the CPU for int8) in ``precision``, converted in place; returns it.

    ``float32`` leaves it as it is; ``bf16`` and ``int8`` replace its linear layers (see the
    module docstring). Converting twice, or back to float32, is not supported: load the model again.
    """
    check_precision(precision)
    if precision == "bf16":
        to_bf16_linears(model)
    elif precision == "int8":
        to_int8_linears(model)
    return model


def model_precision(model: nn.Module) -> str:
    """What :func:`set_precision` made of ``model``: ``int8``, ``bf16`` or ``float32``."""
    for layer in model.modules():
        if isinstance(layer, DynamicLinear):
            return "int8"
        if isinstance(layer, Bf16Linear):
            return "bf16"
    return "float32"


def quantized_engine() -> str:
    """The quantized kernels torch runs: ``x86`` (fbgemm + onednn) or ``fbgemm`` where the
    build has them (x86 CPUs), else ``qnnpack`` (ARM); a :class:`ConfigError` when there are none."""
    engines = torch.backends.quantized.supported_engines
    for name in ("x86", "fbgemm", "qnnpack"):
        if name in engines:
            return name
    raise ConfigError(f"precision int8: this torch build has no quantized engine (supported: {engines})")


def to_int8_linears(model: nn.Module) -> nn.Module:
    """Every ``nn.Linear`` of ``model`` replaced, in place, by an :class:`Int8Linear` (see the
    module docstring); a :class:`ConfigError` on a GPU (the kernels are CPU ones)."""
    from torch.ao.quantization import QConfig, PerChannelMinMaxObserver, PlaceholderObserver, quantize_dynamic

    devices = {p.device.type for p in model.parameters()}
    if devices - {"cpu"}:
        raise ConfigError("precision int8 runs on the CPU (dynamic quantization has CPU kernels only): "
                          "use --device cpu, or bf16 on a GPU")
    engine = quantized_engine()
    if torch.backends.quantized.engine != engine:
        torch.backends.quantized.engine = engine
    qconfig = QConfig(activation=PlaceholderObserver.with_args(dtype=torch.quint8, quant_min=0, quant_max=255,
                                                               is_dynamic=True),
                      weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                                                quant_min=-64, quant_max=63))  # 7 bits
    model.eval()
    with warnings.catch_warnings():  # torch 2.10+ marks quantized tensor constructors deprecated (see the module docstring)
        warnings.filterwarnings("ignore", message=".*quantize_per_.*deprecated", category=UserWarning)
        warnings.filterwarnings("ignore", message="torch.ao.quantization is deprecated", category=DeprecationWarning)
        quantize_dynamic(model, {nn.Linear: qconfig}, dtype=torch.qint8, mapping={nn.Linear: Int8Linear}, inplace=True)
    return model


class Int8Linear(DynamicLinear):
    """torch's dynamically quantized ``Linear`` with one input scale per token and 8-bit
    activations (torch's own reads one range per call and passes ``reduce_range=True``: 7 bits);
    its weights are 7-bit, so AVX2's 16-bit pair sums cannot saturate (see the module docstring)."""

    _rows: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor] | None = None  # built by _prepare

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) float32 -> (..., out) float32
        packed, bias, pin = self._rows or self._prepare()
        rows = x.reshape(-1, x.shape[-1]).float()  # (N, in)
        n = rows.shape[0]
        scale = torch.maximum(rows.amax(1, keepdim=True), rows.amin(1, keepdim=True).neg_()).clamp_min_(1e-30)  # (N, 1)
        unit = rows.new_empty(n + 2, rows.shape[1])  # (N+2, in): every row in [-1, 1], the last two pin the range
        torch.div(rows, scale, out=unit[:n])
        unit[n:] = pin
        y = torch.ops.quantized.linear_dynamic(unit, packed, reduce_range=False)[:n]  # (N, out)
        y = y.mul_(scale) if bias is None else torch.addcmul(bias, y, scale, out=y)  # rows scaled back, in place
        return y.reshape(*x.shape[:-1], y.shape[-1]).to(x.dtype)

    def _prepare(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The weights packed without the bias (added after the rows are scaled back), the bias,
        and the two pinning rows ``(1, 0, …)`` and ``(-1, 0, …)``; built at the first call."""
        weight, bias = self._weight_bias()
        pin = torch.zeros(2, weight.shape[1])
        pin[0, 0], pin[1, 0] = 1.0, -1.0
        self._rows = (torch.ops.quantized.linear_prepack(weight, None), None if bias is None else bias.detach(), pin)
        return self._rows

    def _get_name(self) -> str:
        return "Int8Linear"


# ----------------------------------------------------------------------------- bf16


def bucket_rows(n: int) -> int:
    """``n`` rounded up to a multiple of 16 up to 128, then to the next of a geometric series of
    step 1/8 (in multiples of 32): 39 sizes up to 8,192 rows; beyond 128 rows, at most a quarter
    of the rows are padding."""
    if n <= 128:
        return -(-n // 16) * 16
    size = 128
    while size < n:
        size = max(size + 32, -(-int(size * 1.125) // 32) * 32)
    return size


class Bf16Linear(nn.Linear):
    """A linear layer with bf16 weights whose inputs are padded to :func:`bucket_rows` rows.

    bf16 matmuls run in oneDNN, which builds (and caches, 1,024 by default) a primitive per input
    shape; the unpadded encoder feeds every token count there is, so without buckets the cache
    fills with thousands of shapes and resident memory grows by hundreds of MB, while a smaller
    cache rebuilds primitives on nearly every batch. Padding rows to a few sizes bounds both."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        rows = x.reshape(-1, x.shape[-1])  # (N, in)
        n = rows.shape[0]
        padded = torch.nn.functional.pad(rows.to(self.weight.dtype), (0, 0, 0, bucket_rows(n) - n))  # (bucket, in)
        out = torch.nn.functional.linear(padded, self.weight, self.bias)[:n]  # (N, out)
        return out.reshape(*x.shape[:-1], out.shape[-1])


def to_bf16_linears(module: nn.Module) -> nn.Module:
    """Turn every linear layer into a :class:`Bf16Linear` (weights cast to bf16 once: under
    autocast they are then used as they are, where autocast would cast them on every forward
    pass, which costs more than bf16 gains on small batches); embeddings, layer norms and the
    residual stream stay float32 (a bf16 output added to a float32 residual is float32)."""
    from muppets.train.precision import cpu_has_native_bf16

    if not cpu_has_native_bf16() and not any(p.is_cuda for p in module.parameters()):
        log.warning("precision bf16: this CPU has no bf16 instructions (avx512_bf16 / amx_bf16 in "
                    "/proc/cpuinfo), so forward passes will be slower than in float32, not faster")
    for layer in module.modules():
        if type(layer) is nn.Linear:
            layer.to(torch.bfloat16)
            layer.__class__ = Bf16Linear
    return module
