/* A stand-in libcuda.so.1 for the ray-node-gpu dev layer: the two driver calls the launcher's preflight makes
 * (grpo_launcher/host_checks.py check_libcuda). cuInit answers as the driver does in a container: 0 when the pod was
 * given GPUs, CUDA_ERROR_NO_DEVICE (100) when none (GRPO_STANDIN_GPUS unset or 0, as NVIDIA_VISIBLE_DEVICES=void). */
#include <stdlib.h>

int cuInit(unsigned int flags) {
    (void)flags;
    const char *gpus = getenv("GRPO_STANDIN_GPUS");
    return gpus != NULL && atoi(gpus) > 0 ? 0 : 100;
}

int cuDriverGetVersion(int *version) {
    *version = 13000; /* CUDA 13.0, as the 580 driver reports */
    return 0;
}
