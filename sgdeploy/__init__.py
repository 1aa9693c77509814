"""sgdeploy: deploy SGLang servers to bare-metal GPU hosts safely."""

__version__ = "0.1.0"
