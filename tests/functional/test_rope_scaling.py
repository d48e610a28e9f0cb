"""RoPE context-extension methods (posenc.functional.rope_scaling): reference numbers and math properties."""

import math

import pytest
import torch
from rounding import unit_roundoff

from posenc import functional as pf
from posenc.functional.rope_scaling import ROPE_SCALING
from posenc.functional.rope_scaling_spec import RopeScaling

U32, U64 = unit_roundoff(torch.float32), unit_roundoff(torch.float64)

# Reference numbers: transformers==5.23.0, modeling_rope_utils._compute_{linear_scaling_rope,dynamic_ntk,yarn,
# llama3}_parameters, from a LlamaConfig with head_dim, rope_theta=base and rope_parameters {factor,
# original_max_position_embeddings=train_length (yarn, llama3; max_position_embeddings for dynamic),
# low_freq_factor=1, high_freq_factor=4 (llama3), truncate (yarn)}, seq_len=length (dynamic). "ntk" (static
# NTK; no Hugging Face type) is _compute_dynamic_ntk_parameters with factor=1 at seq_len=factor*train_length,
# whose base is exactly base * factor**(d/(d-2)). Hugging Face computes in float32, posenc in float64: the
# entries agree to float32 precision (10 significant digits printed). Generated once; hardcoded so the tests
# do not need transformers.
# (method, head_dim, base, factor, train_length, length, options, attention_factor, {pair index: inv_freq})
HF_REFERENCE = [
    # Method options (rope_parameters beta_fast/beta_slow, low_freq_factor/high_freq_factor), the same version.
    (
        "yarn",
        32,
        10000.0,
        4.0,
        64,
        64,
        {"beta_fast": 16.0, "beta_slow": 2.0},
        1.138629436111989,
        {
            0: 1,
            1: 0.4217559695,
            2: 0.1581138819,
            3: 0.04445698485,
            4: 0.02500000037,
            5: 0.01405853219,
            6: 0.007905694656,
            7: 0.004445698578,
            8: 0.002499999944,
            15: 4.445698505e-05,
        },
    ),
    (
        "llama3",
        32,
        10000.0,
        4.0,
        64,
        64,
        {"low_freq_factor": 2.0, "high_freq_factor": 8.0},
        1.0,
        {
            0: 1,
            1: 0.4026336968,
            2: 0.1273239553,
            3: 0.04445698485,
            4: 0.02500000037,
            5: 0.01405853219,
            8: 0.002499999944,
            15: 4.445698505e-05,
        },
    ),
    (
        "linear",
        32,
        10000.0,
        2.0,
        64,
        64,
        {},
        1.0,
        {
            0: 0.5,
            1: 0.2811706662,
            2: 0.1581138819,
            3: 0.0889139697,
            4: 0.05000000075,
            5: 0.02811706439,
            6: 0.01581138931,
            7: 0.008891397156,
            8: 0.004999999888,
            9: 0.002811706625,
            10: 0.001581138931,
            11: 0.0008891397156,
            12: 0.0005000000237,
            13: 0.0002811706509,
            14: 0.0001581138931,
            15: 8.89139701e-05,
        },
    ),
    (
        "ntk",
        32,
        10000.0,
        2.0,
        64,
        64,
        {},
        1.0,
        {
            0: 1,
            1: 0.5369468927,
            2: 0.2883119583,
            3: 0.1548082083,
            4: 0.08312378824,
            5: 0.04463306069,
            6: 0.02396558225,
            7: 0.01286824606,
            8: 0.006909564137,
            9: 0.003710068995,
            10: 0.001992110163,
            11: 0.001069657272,
            12: 0.0005743491347,
            13: 0.0003083950141,
            14: 0.0001655917295,
            15: 8.891396283e-05,
        },
    ),
    (
        "dynamic_ntk",
        32,
        10000.0,
        2.0,
        64,
        192,
        {},
        1.0,
        {
            0: 1,
            1: 0.5051286817,
            2: 0.2551549673,
            3: 0.1288860738,
            4: 0.06510404497,
            5: 0.03288592026,
            6: 0.01661162078,
            7: 0.008391004987,
            8: 0.004238537047,
            9: 0.002141006524,
            10: 0.001081483788,
            11: 0.0005462883855,
            12: 0.0002759459312,
            13: 0.000139388183,
            14: 7.04089689e-05,
            15: 3.556558659e-05,
        },
    ),
    (
        "yarn",
        32,
        10000.0,
        2.0,
        64,
        64,
        {},
        1.0693147180559945,
        {
            0: 1,
            1: 0.5061072111,
            2: 0.2529821992,
            3: 0.1244795546,
            4: 0.06000000238,
            5: 0.02811706439,
            6: 0.01581138931,
            7: 0.008891397156,
            8: 0.004999999888,
            9: 0.002811706625,
            10: 0.001581138931,
            11: 0.0008891397156,
            12: 0.0005000000237,
            13: 0.0002811706509,
            14: 0.0001581138931,
            15: 8.89139701e-05,
        },
    ),
    (
        "llama3",
        32,
        10000.0,
        2.0,
        64,
        64,
        {},
        1.0,
        {
            0: 1,
            1: 0.5623413324,
            2: 0.2751745284,
            3: 0.1129604727,
            4: 0.05030985922,
            5: 0.02811706439,
            6: 0.01581138931,
            7: 0.008891397156,
            8: 0.004999999888,
            9: 0.002811706625,
            10: 0.001581138931,
            11: 0.0008891397156,
            12: 0.0005000000237,
            13: 0.0002811706509,
            14: 0.0001581138931,
            15: 8.89139701e-05,
        },
    ),
    (
        "linear",
        32,
        10000.0,
        4.0,
        64,
        64,
        {},
        1.0,
        {
            0: 0.25,
            1: 0.1405853331,
            2: 0.07905694097,
            3: 0.04445698485,
            4: 0.02500000037,
            5: 0.01405853219,
            6: 0.007905694656,
            7: 0.004445698578,
            8: 0.002499999944,
            9: 0.001405853312,
            10: 0.0007905694656,
            11: 0.0004445698578,
            12: 0.0002500000119,
            13: 0.0001405853254,
            14: 7.905694656e-05,
            15: 4.445698505e-05,
        },
    ),
    (
        "ntk",
        32,
        10000.0,
        4.0,
        64,
        64,
        {},
        1.0,
        {
            0: 1,
            1: 0.5126992464,
            2: 0.2628605068,
            3: 0.1347683817,
            4: 0.06909564137,
            5: 0.03542528301,
            6: 0.01816251501,
            7: 0.009311907925,
            8: 0.004774207715,
            9: 0.002447732724,
            10: 0.00125495065,
            11: 0.0006434122333,
            12: 0.000329876988,
            13: 0.0001691276702,
            14: 8.671163232e-05,
            15: 4.445698141e-05,
        },
    ),
    (
        "dynamic_ntk",
        32,
        10000.0,
        4.0,
        64,
        192,
        {},
        1.0,
        {
            0: 1,
            1: 0.4857175946,
            2: 0.2359215766,
            3: 0.1145912558,
            4: 0.05565899238,
            5: 0.02703455277,
            6: 0.0131311575,
            7: 0.006378033664,
            8: 0.003097923473,
            9: 0.001504715881,
            10: 0.0007308669738,
            11: 0.0003549949324,
            12: 0.0001724272879,
            13: 8.375097241e-05,
            14: 4.067931877e-05,
            15: 1.975865962e-05,
        },
    ),
    (
        "yarn",
        32,
        10000.0,
        4.0,
        64,
        64,
        {},
        1.138629436111989,
        {
            0: 1,
            1: 0.4779901206,
            2: 0.2213594317,
            3: 0.09780536592,
            4: 0.03999999911,
            5: 0.01405853219,
            6: 0.007905694656,
            7: 0.004445698578,
            8: 0.002499999944,
            9: 0.001405853312,
            10: 0.0007905694656,
            11: 0.0004445698578,
            12: 0.0002500000119,
            13: 0.0001405853254,
            14: 7.905694656e-05,
            15: 4.445698505e-05,
        },
    ),
    (
        "yarn",
        32,
        10000.0,
        4.0,
        64,
        64,
        {"truncate": False},
        1.138629436111989,
        {
            0: 1,
            1: 0.4577391744,
            2: 0.1985835284,
            3: 0.07859361172,
            4: 0.02559524961,
            5: 0.01405853219,
            6: 0.007905694656,
            7: 0.004445698578,
            8: 0.002499999944,
            9: 0.001405853312,
            10: 0.0007905694656,
            11: 0.0004445698578,
            12: 0.0002500000119,
            13: 0.0001405853254,
            14: 7.905694656e-05,
            15: 4.445698505e-05,
        },
    ),
    (
        "llama3",
        32,
        10000.0,
        4.0,
        64,
        64,
        {},
        1.0,
        {
            0: 1,
            1: 0.5623413324,
            2: 0.2546479106,
            3: 0.08052673936,
            4: 0.02546478994,
            5: 0.01405853219,
            6: 0.007905694656,
            7: 0.004445698578,
            8: 0.002499999944,
            9: 0.001405853312,
            10: 0.0007905694656,
            11: 0.0004445698578,
            12: 0.0002500000119,
            13: 0.0001405853254,
            14: 7.905694656e-05,
            15: 4.445698505e-05,
        },
    ),
    (
        "linear",
        32,
        10000.0,
        8.0,
        64,
        64,
        {},
        1.0,
        {
            0: 0.125,
            1: 0.07029266655,
            2: 0.03952847049,
            3: 0.02222849242,
            4: 0.01250000019,
            5: 0.007029266097,
            6: 0.003952847328,
            7: 0.002222849289,
            8: 0.001249999972,
            9: 0.0007029266562,
            10: 0.0003952847328,
            11: 0.0002222849289,
            12: 0.0001250000059,
            13: 7.029266271e-05,
            14: 3.952847328e-05,
            15: 2.222849253e-05,
        },
    ),
    (
        "ntk",
        32,
        10000.0,
        8.0,
        64,
        64,
        {},
        1.0,
        {
            0: 1,
            1: 0.4895465374,
            2: 0.2396558374,
            3: 0.1173226908,
            4: 0.05743492022,
            5: 0.02811706811,
            6: 0.01376461331,
            7: 0.006738418713,
            8: 0.003298769705,
            9: 0.001614901354,
            10: 0.0007905694656,
            11: 0.0003870205255,
            12: 0.0001894645684,
            13: 9.275173215e-05,
            14: 4.540629016e-05,
            15: 2.222849253e-05,
        },
    ),
    (
        "dynamic_ntk",
        32,
        10000.0,
        8.0,
        64,
        192,
        {},
        1.0,
        {
            0: 1,
            1: 0.4655539989,
            2: 0.2167405486,
            3: 0.1009044275,
            4: 0.04697645828,
            5: 0.02187007852,
            6: 0.0101817036,
            7: 0.00474013295,
            8: 0.0022067877,
            9: 0.001027378952,
            10: 0.0004783003824,
            11: 0.0002226746437,
            12: 0.0001036670801,
            13: 4.826262739e-05,
            14: 2.246885924e-05,
            15: 1.046046691e-05,
        },
    ),
    (
        "yarn",
        32,
        10000.0,
        8.0,
        64,
        64,
        {},
        1.2079441541679836,
        {
            0: 1,
            1: 0.4639315903,
            2: 0.205548048,
            3: 0.08446826786,
            4: 0.03000000119,
            5: 0.007029266097,
            6: 0.003952847328,
            7: 0.002222849289,
            8: 0.001249999972,
            9: 0.0007029266562,
            10: 0.0003952847328,
            11: 0.0002222849289,
            12: 0.0001250000059,
            13: 7.029266271e-05,
            14: 3.952847328e-05,
            15: 2.222849253e-05,
        },
    ),
    (
        "yarn",
        32,
        10000.0,
        8.0,
        64,
        64,
        {"truncate": False},
        1.2079441541679836,
        {
            0: 1,
            1: 0.4403055012,
            2: 0.1789761484,
            3: 0.06205455214,
            4: 0.01319445763,
            5: 0.007029266097,
            6: 0.003952847328,
            7: 0.002222849289,
            8: 0.001249999972,
            9: 0.0007029266562,
            10: 0.0003952847328,
            11: 0.0002222849289,
            12: 0.0001250000059,
            13: 7.029266271e-05,
            14: 3.952847328e-05,
            15: 2.222849253e-05,
        },
    ),
    (
        "llama3",
        32,
        10000.0,
        8.0,
        64,
        64,
        {},
        1.0,
        {
            0: 1,
            1: 0.5623413324,
            2: 0.2443845868,
            3: 0.06430987269,
            4: 0.01304225624,
            5: 0.007029266097,
            6: 0.003952847328,
            7: 0.002222849289,
            8: 0.001249999972,
            9: 0.0007029266562,
            10: 0.0003952847328,
            11: 0.0002222849289,
            12: 0.0001250000059,
            13: 7.029266271e-05,
            14: 3.952847328e-05,
            15: 2.222849253e-05,
        },
    ),
    (
        "linear",
        128,
        500000.0,
        2.0,
        8192,
        8192,
        {},
        1.0,
        {
            0: 0.5,
            1: 0.4073086083,
            16: 0.01880301535,
            24: 0.003646332538,
            30: 0.001065559802,
            31: 0.0008680233732,
            32: 0.000707106723,
            33: 0.0005760213244,
            40: 0.0001371240942,
            48: 2.659147867e-05,
            63: 1.227570351e-06,
        },
    ),
    (
        "ntk",
        128,
        500000.0,
        2.0,
        8192,
        8192,
        {},
        1.0,
        {
            0: 1,
            1: 0.8057036996,
            16: 0.03153591603,
            24: 0.005600259639,
            30: 0.00153200503,
            31: 0.001234342111,
            32: 0.0009945139755,
            33: 0.0008012835169,
            40: 0.0001766093046,
            48: 3.136290616e-05,
            63: 1.227570465e-06,
        },
    ),
    (
        "dynamic_ntk",
        128,
        500000.0,
        2.0,
        8192,
        24576,
        {},
        1.0,
        {
            0: 1,
            1: 0.794070065,
            16: 0.02498856373,
            24: 0.003950135317,
            30: 0.0009902957827,
            31: 0.0007863643114,
            32: 0.0006244283868,
            33: 0.0004958399222,
            40: 9.870821668e-05,
            48: 1.560356941e-05,
            63: 4.910281746e-07,
        },
    ),
    (
        "yarn",
        128,
        500000.0,
        2.0,
        8192,
        8192,
        {},
        1.0693147180559945,
        {
            0: 1,
            1: 0.8146172166,
            16: 0.0376060307,
            24: 0.006005723961,
            30: 0.001378959743,
            31: 0.00107226416,
            32: 0.0008318902692,
            33: 0.0006437885459,
            40: 0.0001371240942,
            48: 2.659147867e-05,
            63: 1.227570351e-06,
        },
    ),
    (
        "llama3",
        128,
        500000.0,
        2.0,
        8192,
        8192,
        {},
        1.0,
        {
            0: 1,
            1: 0.8146172166,
            16: 0.0376060307,
            24: 0.007292665076,
            30: 0.001697276253,
            31: 0.00123359228,
            32: 0.0009060035227,
            33: 0.000672414666,
            40: 0.0001371240942,
            48: 2.659147867e-05,
            63: 1.227570351e-06,
        },
    ),
    (
        "linear",
        128,
        500000.0,
        8.0,
        8192,
        8192,
        {},
        1.0,
        {
            0: 0.125,
            1: 0.1018271521,
            16: 0.004700753838,
            24: 0.0009115831344,
            30: 0.0002663899504,
            31: 0.0002170058433,
            32: 0.0001767766807,
            33: 0.0001440053311,
            40: 3.428102355e-05,
            48: 6.647869668e-06,
            63: 3.068925878e-07,
        },
    ),
    (
        "ntk",
        128,
        500000.0,
        8.0,
        8192,
        8192,
        {},
        1.0,
        {
            0: 1,
            1: 0.7881680131,
            16: 0.02217692509,
            24: 0.003302569734,
            30: 0.000791707891,
            31: 0.0006239988725,
            32: 0.0004918159684,
            33: 0.0003876336268,
            40: 7.324082981e-05,
            48: 1.090696514e-05,
            63: 3.068925878e-07,
        },
    ),
    (
        "dynamic_ntk",
        128,
        500000.0,
        8.0,
        8192,
        24576,
        {},
        1.0,
        {
            0: 1,
            1: 0.7787941098,
            16: 0.0183131285,
            24: 0.002478242386,
            30: 0.0005529422197,
            31: 0.0004306281335,
            32: 0.0003353706561,
            33: 0.0002611847012,
            40: 4.538437133e-05,
            48: 6.14168539e-06,
            63: 1.444200421e-07,
        },
    ),
    (
        "yarn",
        128,
        500000.0,
        8.0,
        8192,
        8192,
        {},
        1.2079441541679836,
        {
            0: 1,
            1: 0.8146172166,
            16: 0.0376060307,
            24: 0.005040518474,
            30: 0.0008148397901,
            31: 0.0005744271912,
            32: 0.0003951478575,
            33: 0.0002625979541,
            40: 3.428102355e-05,
            48: 6.647869668e-06,
            63: 3.068925878e-07,
        },
    ),
    (
        "yarn",
        128,
        500000.0,
        8.0,
        8192,
        8192,
        {"truncate": False},
        1.2079441541679836,
        {
            0: 1,
            1: 0.8146172166,
            16: 0.0376060307,
            24: 0.005058221519,
            30: 0.000816235668,
            31: 0.0005750514683,
            32: 0.0003952386323,
            33: 0.0002623315377,
            40: 3.428102355e-05,
            48: 6.647869668e-06,
            63: 3.068925878e-07,
        },
    ),
    (
        "llama3",
        128,
        500000.0,
        8.0,
        8192,
        8192,
        {},
        1.0,
        {
            0: 1,
            1: 0.8146172166,
            16: 0.0376060307,
            24: 0.007292665076,
            30: 0.001371893683,
            31: 0.0008567514597,
            32: 0.000524846022,
            33: 0.0003126936499,
            40: 3.428102355e-05,
            48: 6.647869668e-06,
            63: 3.068925878e-07,
        },
    ),
    (
        "linear",
        128,
        10000.0,
        4.0,
        4096,
        4096,
        {},
        1.0,
        {
            0: 0.25,
            1: 0.2164910883,
            16: 0.02500000037,
            24: 0.007905694656,
            30: 0.003333803732,
            31: 0.002886954928,
            32: 0.002499999944,
            33: 0.00216491078,
            40: 0.0007905694656,
            48: 0.0002500000119,
            63: 2.886954826e-05,
        },
    ),
    (
        "ntk",
        128,
        10000.0,
        4.0,
        4096,
        4096,
        {},
        1.0,
        {
            0: 1,
            1: 0.8471172452,
            16: 0.070322752,
            24: 0.0186484959,
            30: 0.006891357247,
            31: 0.005837787408,
            32: 0.004945289809,
            33: 0.004189240281,
            40: 0.001311413711,
            48: 0.0003477664141,
            63: 2.88695519e-05,
        },
    ),
    (
        "dynamic_ntk",
        128,
        10000.0,
        4.0,
        4096,
        12288,
        {},
        1.0,
        {
            0: 1,
            1: 0.8362830281,
            16: 0.05723381415,
            24: 0.01369238365,
            30: 0.004683805164,
            31: 0.003916986752,
            32: 0.00327570946,
            33: 0.002739420161,
            40: 0.0007836673758,
            48: 0.0001874813606,
            63: 1.283091115e-05,
        },
    ),
    (
        "yarn",
        128,
        10000.0,
        4.0,
        4096,
        4096,
        {},
        1.138629436111989,
        {
            0: 1,
            1: 0.8659643531,
            16: 0.1000000015,
            24: 0.02797399648,
            30: 0.009488517419,
            31: 0.00788360741,
            32: 0.006538461894,
            33: 0.005412276834,
            40: 0.001337886788,
            48: 0.0002500000119,
            63: 2.886954826e-05,
        },
    ),
    (
        "yarn",
        128,
        10000.0,
        4.0,
        4096,
        4096,
        {"truncate": False},
        1.138629436111989,
        {
            0: 1,
            1: 0.8659643531,
            16: 0.1000000015,
            24: 0.02861361019,
            30: 0.009574460797,
            31: 0.007931507193,
            32: 0.006556970999,
            33: 0.005408415105,
            40: 0.001285631908,
            48: 0.0002500000119,
            63: 2.886954826e-05,
        },
    ),
    (
        "llama3",
        128,
        10000.0,
        4.0,
        4096,
        4096,
        {},
        1.0,
        {
            0: 1,
            1: 0.8659643531,
            16: 0.1000000015,
            24: 0.03162277862,
            30: 0.01333521493,
            31: 0.01154781971,
            32: 0.009999999776,
            33: 0.008659643121,
            40: 0.001629746752,
            48: 0.0002500000119,
            63: 2.886954826e-05,
        },
    ),
]


def _ids(case):
    method, hd, base, s, L, Lp, options = case[:7]
    return f"{method}-d{hd}-b{base:g}-s{s:g}-L{L}-Lp{Lp}" + "".join(f"-{k}={v}" for k, v in options.items())


@pytest.mark.parametrize("case", HF_REFERENCE, ids=[_ids(c) for c in HF_REFERENCE])
def test_methods_match_hugging_face_reference_numbers(case):
    method, head_dim, base, factor, train_length, length, options, attention, expected = case
    inv_freq, scale = ROPE_SCALING[method](head_dim, base, factor, train_length, length, **options)
    assert inv_freq.shape == (head_dim // 2,) and inv_freq.dtype == torch.float64
    assert scale == pytest.approx(attention, rel=1e-12)
    index = torch.tensor(list(expected))
    want = torch.tensor(list(expected.values()), dtype=torch.float64)
    # Hugging Face computes in float32: pow(base, 2j/d) (2j/d exact for these d; powf within 1 ulp: 2u), its
    # reciprocal (u), the method's division, ramp and blend (at most 10 roundings, each of condition <= 1), then
    # 10 printed digits (1e-10); posenc's float64 is exact by comparison: at most 16 u of float32 apart
    torch.testing.assert_close(inv_freq[index], want, rtol=16 * U32, atol=0)


def test_registry_has_the_documented_methods_and_reference_covers_all_but_none():
    assert list(ROPE_SCALING) == ["none", "linear", "ntk", "dynamic_ntk", "yarn", "llama3"]
    assert {c[0] for c in HF_REFERENCE} == set(ROPE_SCALING) - {"none"}
    assert all(ROPE_SCALING[m] is getattr(pf, f"{m}_scaling") for m in ROPE_SCALING)


# Dynamic NTK's base grows with length / train_length even at factor 1 (see the dynamic test below).
FACTOR_ONE = [(m, n) for m in ROPE_SCALING for n in (16, 64, 1000) if not (m == "dynamic_ntk" and n > 64)]


@pytest.mark.parametrize("method, length", FACTOR_ONE)
@pytest.mark.parametrize("head_dim, base", [(8, 10000.0), (32, 10000.0), (128, 500000.0)])
def test_factor_one_is_plain_rope_for_every_method(method, length, head_dim, base):
    inv_freq, scale = ROPE_SCALING[method](head_dim, base, 1.0, 64, length)
    assert torch.equal(inv_freq, pf.rope_inv_freq(head_dim, base, dtype=torch.float64))
    assert scale == 1.0


@pytest.mark.parametrize("method", ROPE_SCALING)
def test_every_method_returns_float64_pairs_and_a_positive_scale(method):
    inv_freq, scale = ROPE_SCALING[method](16, 10000.0, 3.0, 32, 96)
    assert inv_freq.shape == (8,) and inv_freq.dtype == torch.float64
    assert isinstance(scale, float) and scale >= 1.0
    plain = pf.rope_inv_freq(16, 10000.0, dtype=torch.float64)
    assert torch.all(inv_freq <= plain * (1 + 1e-12))  # extension only ever slows rotations down
    most = 3.0 * 96 / 32 - 2.0 if method == "dynamic_ntk" else 3.0  # dynamic: its effective NTK scale
    assert torch.all(inv_freq >= plain / most * (1 - 1e-12))  # ... and by at most the factor


@pytest.mark.parametrize("method", ROPE_SCALING)
def test_every_method_refuses_bad_inputs(method):
    fn = ROPE_SCALING[method]
    with pytest.raises(ValueError, match="head_dim must be even"):
        fn(7, 10000.0, 2.0, 64, 128)
    with pytest.raises(ValueError, match="factor must be"):
        fn(8, 10000.0, 0.0, 64, 128)
    with pytest.raises(ValueError, match="factor must be"):
        fn(8, 10000.0, math.inf, 64, 128)
    with pytest.raises(ValueError, match="base must be > 1"):
        fn(8, 1.0, 2.0, 64, 128)
    with pytest.raises(ValueError, match="train_length"):
        fn(8, 10000.0, 2.0, 0, 128)
    with pytest.raises(ValueError, match="length must be >= 1"):
        fn(8, 10000.0, 2.0, 64, 0)


def test_method_options_are_validated():
    with pytest.raises(ValueError, match="beta_fast must be > beta_slow"):
        pf.yarn_scaling(32, 10000.0, 2.0, 64, 64, beta_fast=1.0, beta_slow=1.0)
    with pytest.raises(ValueError, match="beta_slow must be > 0"):
        pf.yarn_scaling(32, 10000.0, 2.0, 64, 64, beta_slow=0.0)
    with pytest.raises(ValueError, match="high_freq_factor > low_freq_factor"):
        pf.llama3_scaling(32, 10000.0, 2.0, 64, 64, low_freq_factor=4.0, high_freq_factor=4.0)
    for fn in (pf.ntk_scaling, pf.dynamic_ntk_scaling):
        with pytest.raises(ValueError, match="head_dim must be > 2"):
            fn(2, 10000.0, 2.0, 64, 128)


@pytest.mark.parametrize("factor", [0.5, 2.0, 8.0])
def test_none_ignores_the_factor_and_linear_divides_every_frequency(factor):
    plain = pf.rope_inv_freq(32, 10000.0, dtype=torch.float64)
    assert torch.equal(pf.none_scaling(32, 10000.0, factor, 64, 512)[0], plain)
    inv_freq, scale = pf.linear_scaling(32, 10000.0, factor, 64, 512)
    assert torch.equal(inv_freq, plain / factor) and scale == 1.0


@pytest.mark.parametrize("head_dim", [4, 32, 128])
@pytest.mark.parametrize("factor", [2.0, 16.0])
def test_ntk_keeps_the_highest_frequency_and_divides_the_lowest_by_exactly_the_factor(head_dim, factor):
    plain = pf.rope_inv_freq(head_dim, 10000.0, dtype=torch.float64)
    inv_freq, scale = pf.ntk_scaling(head_dim, 10000.0, factor, 64, 64)
    assert inv_freq[0] == plain[0] == 1.0 and scale == 1.0
    assert inv_freq[-1].item() == pytest.approx(plain[-1].item() / factor, rel=1e-12)
    ratio = plain / inv_freq  # grows geometrically from 1 to factor
    # all float64: each frequency is pow(b, -2j/d) with |log b| <= 13 (its relative error at most 13 u beside the
    # pow's own 2 u), the ratio one rounding, the expected pow another 2 u plus its exponent's (u * log 16): < 40 u
    want = factor ** (torch.arange(head_dim // 2, dtype=torch.float64) / (head_dim // 2 - 1))
    torch.testing.assert_close(ratio, want, rtol=40 * U64, atol=0)
    base = pf.ntk_base(10000.0, head_dim, factor)
    assert torch.equal(inv_freq, pf.rope_inv_freq(head_dim, base, dtype=torch.float64))


def test_dynamic_ntk_is_plain_up_to_train_length_and_static_ntk_with_factor_one_beyond():
    plain = pf.rope_inv_freq(32, 10000.0, dtype=torch.float64)
    for length in (1, 63, 64):
        assert torch.equal(pf.dynamic_ntk_scaling(32, 10000.0, 4.0, 64, length)[0], plain)
    beyond = pf.dynamic_ntk_scaling(32, 10000.0, 1.0, 64, 256)[0]
    torch.testing.assert_close(beyond, pf.ntk_scaling(32, 10000.0, 4.0, 64, 64)[0], rtol=1e-14, atol=0)
    # with factor s the effective NTK scale is s * L'/L - (s - 1)
    torch.testing.assert_close(
        pf.dynamic_ntk_scaling(32, 10000.0, 2.0, 64, 256)[0],
        pf.ntk_scaling(32, 10000.0, 7.0, 64, 64)[0],
        rtol=1e-14,
        atol=0,
    )


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_extrapolates_high_frequencies_and_interpolates_low_ones(truncate):
    head_dim, base, factor, L = 64, 10000.0, 8.0, 4096
    plain = pf.rope_inv_freq(head_dim, base, dtype=torch.float64)
    inv_freq, scale = pf.yarn_scaling(head_dim, base, factor, L, L, truncate=truncate)
    turns = L * plain / (2 * math.pi)  # full rotations of each pair over the training context
    fast, slow = turns > 32, turns < 1
    assert fast.any() and slow.any() and (~fast & ~slow).any()
    assert torch.equal(inv_freq[fast], plain[fast])  # beta_fast: left alone (extrapolation)
    torch.testing.assert_close(inv_freq[slow], plain[slow] / factor, rtol=1e-15, atol=0)  # beta_slow: PI
    middle = ~fast & ~slow
    assert torch.all(inv_freq[middle] <= plain[middle])
    assert torch.all(inv_freq[middle] >= plain[middle] / factor)
    stretch = plain / inv_freq
    assert torch.all(stretch[1:] >= stretch[:-1])  # the ramp is monotone in the pair index
    assert scale == pytest.approx(0.1 * math.log(factor) + 1)


@pytest.mark.parametrize(
    "factor, mscale", [(0.5, 1.0), (1.0, 1.0), (2.0, 1.0693147180559945), (16.0, 1.2772588722239781)]
)
def test_yarn_attention_scale_is_mscale(factor, mscale):
    assert pf.yarn_scaling(32, 10000.0, factor, 64, 64)[1] == pytest.approx(mscale, rel=1e-15)


def test_yarn_truncate_floors_and_ceils_the_correction_range():
    # d=32, base=1e4, L=64: the correction dims are -1.99 (beta_fast=32 turns; clamped to 0) and 4.03
    # (beta_slow=1 turn). truncate: ramp j/5 (ceil); without: ramp j/4.03.
    slow = 32 * math.log(64 / (2 * math.pi)) / (2 * math.log(10000.0))
    assert 32 * math.log(64 / (32 * 2 * math.pi)) / (2 * math.log(10000.0)) < 0 and 4 < slow < 5
    plain = pf.rope_inv_freq(32, 10000.0, dtype=torch.float64)
    for truncate, high in ((True, 5.0), (False, slow)):
        ramp = (torch.arange(16, dtype=torch.float64) / high).clamp(0, 1)
        expected = plain / 2 * ramp + plain * (1 - ramp)  # the reference's interpolation/extrapolation blend
        torch.testing.assert_close(pf.yarn_scaling(32, 10000.0, 2.0, 64, 64, truncate=truncate)[0], expected)


def test_llama3_keeps_high_frequencies_divides_low_ones_and_blends_between():
    head_dim, base, factor, L = 128, 500000.0, 8.0, 8192
    plain = pf.rope_inv_freq(head_dim, base, dtype=torch.float64)
    inv_freq, scale = pf.llama3_scaling(head_dim, base, factor, L, L)
    wavelength = 2 * math.pi / plain
    high, low = wavelength < L / 4, wavelength > L / 1
    assert high.any() and low.any() and (~high & ~low).any() and scale == 1.0
    assert torch.equal(inv_freq[high], plain[high])
    torch.testing.assert_close(inv_freq[low], plain[low] / factor, rtol=1e-15, atol=0)
    middle = ~high & ~low
    assert torch.all(inv_freq[middle] < plain[middle])
    assert torch.all(inv_freq[middle] > plain[middle] / factor)


def test_rope_scaling_config_resolves_and_validates():
    assert RopeScaling() == RopeScaling("none", None)
    with pytest.raises(ValueError, match="method 'bogus'; known methods: none, linear, ntk, dynamic_ntk"):
        RopeScaling("bogus").validate()
    for bad in (0, -1.0, math.nan, "2", True):
        with pytest.raises(ValueError, match="rope scaling factor must be a number > 0"):
            RopeScaling("linear", bad).validate()
    assert RopeScaling("linear", 2).validate() == RopeScaling("linear", 2)
    # None follows the evaluation length, never below 1; a fixed factor is used as given
    assert RopeScaling("yarn").factor_for(64, 256) == 4.0
    assert RopeScaling("yarn").factor_for(64, 32) == 1.0
    assert RopeScaling("yarn", 2.0).factor_for(64, 256) == 2.0
    assert RopeScaling("dynamic_ntk").factor_for(64, 256) == 1.0  # it follows the length by itself
    inv_freq, scale = RopeScaling("yarn").resolve(32, 10000.0, 64, 256)
    expected, expected_scale = pf.yarn_scaling(32, 10000.0, 4.0, 64, 256)
    assert torch.equal(inv_freq, expected) and scale == expected_scale
    inv_freq, _ = RopeScaling("dynamic_ntk").resolve(32, 10000.0, 64, 256)
    assert torch.equal(inv_freq, pf.ntk_scaling(32, 10000.0, 4.0, 64, 256)[0])
    with pytest.raises(ValueError, match="unknown rope scaling method"):
        RopeScaling("bogus").resolve(32, 10000.0, 64, 256)


def test_method_options_are_the_functions_keywords_and_the_original_length():
    from posenc.functional.rope_scaling_spec import method_options

    assert method_options("yarn") == {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": True,
        "original_max_position_embeddings": None,
    }
    assert method_options("llama3") == {
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": None,
    }
    assert method_options("none") == {}


def test_options_reach_the_method_and_change_its_frequencies():
    default = RopeScaling("yarn", 4.0).resolve(32, 10000.0, 64, 256)
    given = RopeScaling("yarn", 4.0, (("beta_fast", 16.0), ("beta_slow", 2.0))).resolve(32, 10000.0, 64, 256)
    direct = pf.yarn_scaling(32, 10000.0, 4.0, 64, 256, beta_fast=16.0, beta_slow=2.0)
    torch.testing.assert_close(given[0], direct[0], rtol=0, atol=0)
    assert not torch.equal(given[0], default[0])
    llama = RopeScaling("llama3", 4.0, (("low_freq_factor", 2.0), ("high_freq_factor", 8.0)))
    assert not torch.equal(
        llama.resolve(32, 10000.0, 64, 256)[0], RopeScaling("llama3", 4.0).resolve(32, 10000.0, 64, 256)[0]
    )


def test_original_length_replaces_the_training_length_where_methods_read_it():
    """original_max_position_embeddings is L: the factor that follows the length is L'/L, and the methods'
    L (YaRN's correction range, Llama 3's wavelength bands) is it too."""
    scaling = RopeScaling("yarn", None, (("original_max_position_embeddings", 16),))
    assert scaling.factor_for(64, 256) == 16.0
    torch.testing.assert_close(
        scaling.resolve(32, 10000.0, 64, 256)[0], pf.yarn_scaling(32, 10000.0, 16.0, 16, 256)[0], rtol=0, atol=0
    )
    assert RopeScaling("yarn").factor_for(64, 256) == 4.0


@pytest.mark.parametrize(("options", "message"), [
    ((("beta",  3.0),), "yarn has no option 'beta'; its options: beta_fast, beta_slow, truncate"),
    ((("beta_fast", "16"),), "option beta_fast must be of type float"),
    ((("truncate", 1),), "option truncate must be of type bool"),
    ((("beta_fast", -1.0),), "option beta_fast must be a finite number > 0"),
    ((("original_max_position_embeddings", 1.5),), "must be of type int"),
])  # fmt: skip
def test_bad_options_are_refused_like_hugging_face_validates_rope_scaling(options, message):
    with pytest.raises(ValueError, match=message):
        RopeScaling("yarn", 2.0, options).validate()


def test_labels_name_the_factor_and_options():
    assert RopeScaling("yarn").label() == "yarn"
    assert RopeScaling("yarn", 4.0).label() == "yarn:4"
    assert (
        RopeScaling("yarn", None, (("beta_fast", 16.0), ("truncate", False))).label()
        == "yarn(beta_fast=16,truncate=false)"
    )
