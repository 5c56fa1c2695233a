"""Every error path of the Python API: the exception type a caller catches, the C++ error's context in the
message, and no crash."""

import numpy as np
import pytest

import factorjit as fj


@pytest.fixture(scope="module")
def program():
    return fj.compile({"c": "correlation(close, volume, 10)"}, backend="cpu")


def data(rows=30, cols=4, dtype=np.float64):
    rng = np.random.default_rng(3)
    return {"close": rng.random((rows, cols)).astype(dtype), "volume": rng.random((rows, cols)).astype(dtype)}


def test_error_classes():
    assert issubclass(fj.Error, Exception) and not issubclass(fj.Error, ValueError)
    assert issubclass(fj.ParseError, fj.ExprError) and issubclass(fj.ExprError, ValueError)
    assert issubclass(fj.InputError, ValueError) and issubclass(fj.MissingInputError, KeyError)
    assert issubclass(fj.BackendError, fj.Error) and issubclass(fj.RunError, fj.Error)


def test_parse_error_carries_line_column_and_caret():
    with pytest.raises(fj.ParseError) as e:
        fj.compile({"x": "correlation(open, volume 10)"})
    assert e.value.line == 1 and e.value.column == 26
    assert "expected ',' or ')' after argument 2 of correlation" in str(e.value)
    assert "correlation(open, volume 10)\n" in str(e.value) and str(e.value).rstrip().endswith("^")
    with pytest.raises(fj.ParseError, match="unknown function 'corelation'"):
        fj.parse("corelation(a, b, 5)")


def test_bad_expressions_name_the_operator():
    a, b = fj.input("a"), fj.input("b")
    with pytest.raises(fj.ExprError, match="window"):
        fj.window(a, 0)
    with pytest.raises(fj.ExprError, match="corr"):
        fj.corr(fj.window(a, 5), fj.window(b, 6))
    with pytest.raises(fj.ExprError, match="ts_rank"):
        fj.parse("rank(window(a, 5))")
    with pytest.raises(TypeError, match="where: argument 2 must be an expression or a number, got str"):
        fj.where(a > 0, "x", b)
    with pytest.raises(TypeError, match="truth value"):
        bool(a < b)
    with pytest.raises(TypeError, match="truth value"):
        0 < a < 1
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(TypeError):
        hash(a)


def test_bad_compile_arguments():
    with pytest.raises(TypeError, match="dict of named outputs"):
        fj.compile("ts_mean(a, 5)")
    with pytest.raises(TypeError, match="output 'x'"):
        fj.compile({"x": 5})
    with pytest.raises(ValueError, match="backend"):
        fj.compile({"x": "a + 1"}, backend="gpu")
    with pytest.raises(TypeError, match="dtype"):
        fj.compile({"x": "a + 1"}, dtype=np.int32)


def test_missing_input_is_a_key_error(program):
    with pytest.raises(KeyError) as e:
        program.run(close=data()["close"])
    assert isinstance(e.value, fj.MissingInputError) and isinstance(e.value, fj.Error)
    assert str(e.value) == "missing input 'volume': the program reads close, volume; given: close"


def test_integer_boolean_and_other_dtypes_are_type_errors(program):
    d = data()
    for bad in (d["volume"].astype(np.int64), d["volume"] > 0.5, d["volume"].astype(np.float16),
                d["volume"].astype(np.complex128)):
        with pytest.raises(TypeError, match="input 'volume'"):
            program.run(close=d["close"], volume=bad)


def test_mixed_dtypes_and_shapes(program):
    d = data()
    with pytest.raises(TypeError, match="one dtype: 'close' float64, 'volume' float32"):
        program.run(close=d["close"], volume=d["volume"].astype(np.float32))
    with pytest.raises(fj.InputError, match="one shape .*: 'close' 30 x 4, 'volume' 29 x 4"):
        program.run(close=d["close"], volume=d["volume"][1:])
    with pytest.raises(ValueError, match="3 dimensions"):
        program.run(close=d["close"][None], volume=d["volume"][None])


def test_non_arrays_are_type_errors(program):
    d = data()
    with pytest.raises(TypeError, match="input 'close': expected a NumPy array.*got builtins.list"):
        program.run(close=d["close"].tolist(), volume=d["volume"])


def test_cpu_program_refuses_nothing_on_empty_and_tiny_panels(program):
    """Degenerate shapes either run or raise an fj error; they never crash the process."""
    for rows, cols in ((0, 4), (4, 0), (1, 1), (0, 0)):
        d = data(rows=rows, cols=cols)
        try:
            out = program.run(**d)
            assert out["c"].shape == (rows, cols)
        except fj.Error:
            pass


def test_cuda_backend_without_a_gpu_is_a_backend_error():
    auto = fj.compile({"x": "a + 1"})
    if auto.backend == "cuda":
        pytest.skip("this machine has a usable GPU")
    with pytest.raises(fj.BackendError):
        fj.compile({"x": "a + 1"}, backend="cuda")
