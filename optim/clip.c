#include <math.h>

#include "optim.h"

float clip_scale(double global_norm, float max_norm) {
    if (max_norm <= 0.0f || !(global_norm > max_norm)) return 1.0f;
    return (float)(max_norm / global_norm);
}
