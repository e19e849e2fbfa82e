#!/usr/bin/python3
"""YaRN's rotary table written from its published formulas, for yarn_rope_test.

YaRN (Peng et al. 2023, arXiv 2309.00071, section 3) with the settings
Hugging Face's config.json gives it (transformers >= 4.51, DeepSeek-V3's
yarn_get_mscale), computed the way transformers does: the scalars as Python
floats, the frequencies as fp32 tensors in Debian's torch. Shares no code with
tetra. Prints, one item a line:

  attention <float.hex of the factor multiplying cos and sin>
  softmax <float.hex of DeepSeek-V3's softmax-scale multiplier>
  <position> <cos bits x dim/2> <sin bits x dim/2>   (fp32 bit patterns, hex)

theta^(2i / dim) and cos and sin are correctly rounded to fp32 (transformers
takes torch's fp32 pow and cos, within an ulp of these); cos and sin are of the
fp32 angle position * inv_freq, then times the fp32 attention factor.
"""
import argparse
import math

import torch


def mscale(scale, m):
    """The paper's magnitude correction sqrt(1/t) = 0.1 ln(s) + 1, with DeepSeek-V3's weight m."""
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def ramp_ends(a):
    """The dims where frequencies turn beta_fast and beta_slow times over the original context.

    Dim d's wavelength is 2 pi theta^(d / dim), so it turns original / wavelength
    times; solving that for d at r turns gives dim ln(original / (2 pi r)) / (2 ln theta).
    """
    def dim_at(turns):
        return (a.dim * math.log(a.original / (turns * 2 * math.pi))) / (2 * math.log(a.theta))

    low, high = dim_at(a.beta_fast), dim_at(a.beta_slow)
    if a.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, a.dim - 1)
    if low == high:
        high += 0.001  # a ramp of no width would divide by zero
    return low, high


def wavelength_bases(a):
    """theta^(2i / dim) for the fp32 exponents, correctly rounded to fp32.

    transformers takes torch's fp32 pow, which is within an ulp of these (on the
    CPU Sleef's, on a GPU CUDA's, each off by one at a few i); tetra's table
    takes the correctly rounded ones, so this reference does too, after
    checking torch's against them.
    """
    exponents = torch.arange(0, a.dim, 2, dtype=torch.int64).float() / a.dim
    exact = (torch.tensor(a.theta, dtype=torch.float32).double() ** exponents.double()).float()
    torch_pow = a.theta ** exponents
    ulps = (torch_pow.view(torch.int32) - exact.view(torch.int32)).abs().max().item()
    assert ulps <= 1, f"torch's pow is {ulps} ulps from the correctly rounded one"
    return exact


def inv_freq(a):
    """Frequencies: extrapolated (kept) above the ramp, interpolated (divided by factor) below it."""
    wavelength_base = wavelength_bases(a)
    kept = 1.0 / wavelength_base
    divided = 1.0 / (a.factor * wavelength_base)
    low, high = ramp_ends(a)
    ramp = ((torch.arange(a.dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp
    return divided * (1 - keep) + kept * keep


def attention_factor(a):
    if a.mscale and a.mscale_all_dim:
        return mscale(a.factor, a.mscale) / mscale(a.factor, a.mscale_all_dim)
    return mscale(a.factor, 1.0)


def softmax_multiplier(a):
    return mscale(a.factor, a.mscale_all_dim) ** 2 if a.mscale_all_dim else 1.0


def bits(t):
    return " ".join("%08x" % (v & 0xFFFFFFFF) for v in t.view(torch.int32).tolist())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, required=True, help="rotary dims (DeepSeek-V3: qk_rope_head_dim 64)")
    p.add_argument("--theta", type=float, required=True)
    p.add_argument("--factor", type=float, required=True)
    p.add_argument("--original", type=int, required=True, help="original_max_position_embeddings")
    p.add_argument("--beta-fast", type=float, default=32.0)
    p.add_argument("--beta-slow", type=float, default=1.0)
    p.add_argument("--mscale", type=float, default=0.0, help="0: absent")
    p.add_argument("--mscale-all-dim", type=float, default=0.0, help="0: absent")
    p.add_argument("--no-truncate", dest="truncate", action="store_false")
    p.add_argument("--positions", type=int, nargs="+", required=True)
    a = p.parse_args()

    attention = attention_factor(a)
    print("attention", attention.hex())
    print("softmax", softmax_multiplier(a).hex())
    freqs = inv_freq(a)
    for position in a.positions:
        angle = torch.tensor(float(position), dtype=torch.float32) * freqs  # fp32, as the matmul of HF's
        cos = angle.double().cos().float() * attention
        sin = angle.double().sin().float() * attention
        print(position, bits(cos), bits(sin))


if __name__ == "__main__":
    main()
