#include "trace/model.h"
