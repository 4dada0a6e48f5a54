#include "app/view/core/colors.h"

#include "app/view/core/view_run.h"

namespace braid::view {

Rgb category_color(uint8_t category) {
  if (category >= kCategoryMemcpy && category < kCategoryCpu)
    category = static_cast<uint8_t>(Category::Memory);  // a copy
  switch (category) {
    case kCategoryCpu:
      return {96, 125, 139};
    case kCategoryAnnotation:
      return {189, 176, 104};
    case kCategoryStep:
      return {120, 144, 176};
    default:
      break;
  }
  switch (static_cast<Category>(category)) {
    case Category::Other:
      return {158, 158, 158};
    case Category::Gemm:
      return {66, 133, 244};
    case Category::Attention:
      return {156, 39, 176};
    case Category::Elementwise:
      return {76, 175, 80};
    case Category::Memory:
      return {141, 110, 99};
    case Category::CommAllReduce:
      return {229, 57, 53};
    case Category::CommAllGather:
      return {255, 152, 0};
    case Category::CommReduceScatter:
      return {255, 214, 0};
    case Category::CommBroadcast:
      return {240, 98, 146};
    case Category::CommReduce:
      return {183, 28, 28};
    case Category::CommAllToAll:
      return {216, 27, 96};
    case Category::CommSendRecv:
      return {0, 172, 193};
    case Category::CommOther:
      return {255, 112, 67};
  }
  return {158, 158, 158};
}

std::string category_name(uint8_t category) {
  if (category == kCategoryCpu) return "cpu";
  if (category == kCategoryAnnotation) return "annotation";
  if (category == kCategoryStep) return "step";
  if (category >= kCategoryMemcpy) return std::string(to_string(Category::Memory));  // a copy
  return std::string(to_string(static_cast<Category>(category)));
}

}  // namespace braid::view
