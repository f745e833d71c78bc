"""vllm.model_executor.model_loader.utils.process_weights_after_loading: vLLM
runs each layer's quantization method's post-load step here; the stand-in
model counts the calls so tests see the hook ran after every update."""


def process_weights_after_loading(model, model_config, target_device) -> None:
    model.processed_after_loading += 1
