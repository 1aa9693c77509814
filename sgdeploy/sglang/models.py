"""Facts about model architectures that SGLang's rules depend on (from SGLang's model config)."""

from __future__ import annotations

# Architectures SGLang 0.5.1x treats as multimodal (`multimodal_model_archs`): for them it
# silently turns the piecewise CUDA graph off unless it is enforced.
MULTIMODAL_ARCHITECTURES = frozenset({
    "CLIPModel", "DeepseekVL2ForCausalLM", "Ernie4_5_VLMoeForConditionalGeneration",
    "Gemma3ForConditionalGeneration", "Gemma3nForConditionalGeneration",
    "Gemma4ForConditionalGeneration", "Glm4vForConditionalGeneration",
    "Glm4vMoeForConditionalGeneration", "GlmOcrForConditionalGeneration",
    "GlmAsrForConditionalGeneration", "Grok1VForCausalLM", "Grok1AForCausalLM",
    "LlavaLlamaForCausalLM", "Llama4ForConditionalGeneration", "LlavaMistralForCausalLM",
    "LlavaQwenForCausalLM", "LlavaForConditionalGeneration", "LlavaVidForCausalLM",
    "Lfm2VlForConditionalGeneration", "LightOnOCRForConditionalGeneration", "MiniCPMO",
    "MiniCPMV", "Mistral3ForConditionalGeneration", "MultiModalityCausalLM",
    "MllamaForConditionalGeneration", "MossVLForConditionalGeneration", "NemotronH_Nano_VL_V2",
    "NemotronH_Nano_Omni_Reasoning_V3", "PixtralForConditionalGeneration",
    "Qwen2AudioForConditionalGeneration", "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "Qwen3ASRForConditionalGeneration",
    "Qwen3OmniMoeForConditionalGeneration", "KimiVLForConditionalGeneration",
    "InternVLChatModel", "InternS1ForConditionalGeneration", "InternS1ProForConditionalGeneration",
    "Phi4MMForCausalLM", "VoxtralForConditionalGeneration", "WhisperForConditionalGeneration",
    "Step3VLForConditionalGeneration", "POINTSV15ChatModel", "DotsVLMForCausalLM",
    "DotsOCRForCausalLM", "Sarashina2VisionForCausalLM", "NVILAForConditionalGeneration",
    "NVILALiteForConditionalGeneration", "DeepseekOCRForCausalLM",
    "JetVLMForConditionalGeneration", "PaddleOCRVLForConditionalGeneration", "MiDashengLMModel",
    "StepVLForConditionalGeneration", "KimiK25ForConditionalGeneration",
    "MiMoV2VLForConditionalGeneration",
})

# Architectures whose piecewise CUDA graph SGLang 0.5.1x always disables.
PIECEWISE_DISABLED_ARCHITECTURES = frozenset({
    "DeepseekV32ForCausalLM", "Qwen3NextForCausalLM", "GlmMoeDsaForCausalLM",
    "BailingMoeV2_5ForCausalLM", "LLaDAModelLM",
})

# Hybrid (Mamba / linear-attention) models: the radix cache strategy matters for them.
MAMBA_HYBRID_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "NemotronHForCausalLM", "FalconH1ForCausalLM",
    "KimiLinearForCausalLM", "BailingMoeV2_5ForCausalLM", "Lfm2ForCausalLM",
    "GraniteMoeHybridForCausalLM", "JetNemotronForCausalLM",
})

# Encoder disaggregation (`--encoder-only` / `--language-only`) allow-lists, per version family.
ENCODER_DISAGG_ARCHITECTURES_0_5_1X = frozenset({
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3OmniMoeForConditionalGeneration", "Qwen2AudioForConditionalGeneration",
    "Qwen2_5OmniForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
})
ENCODER_DISAGG_ARCHITECTURES_0_5_2X = ENCODER_DISAGG_ARCHITECTURES_0_5_1X | frozenset({
    "InternS2ForConditionalGeneration", "Dots3NoteForConditionalGeneration",
    "KimiVLForConditionalGeneration", "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration", "MiMoV2VLForConditionalGeneration",
    "GLM5NextForConditionalGeneration", "MiniMaxM3ForConditionalGeneration",
    "MuseSparkForConditionalGeneration",
})

# Architectures for which SGLang auto-enables FlashInfer all-reduce fusion on SM90+ at tp > 1.
ALLREDUCE_FUSION_ARCHITECTURES = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "Qwen3MoeForCausalLM", "KimiK25ForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
})


def is_multimodal(architecture: str | None) -> bool:
    return architecture in MULTIMODAL_ARCHITECTURES


def is_mamba_hybrid(architecture: str | None) -> bool:
    return architecture in MAMBA_HYBRID_ARCHITECTURES
