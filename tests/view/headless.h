// A headless ImGui context for frames built without a display (no GL backend), shared by the
// view's frame tests and the frame benchmark: no ini file, the font atlas built (as a backend
// would), the display `width` x `height`, 60 frames a second.
#pragma once

#include <imgui.h>

namespace braid::test {

inline ImGuiIO& create_headless_imgui(float width, float height) {
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  unsigned char* px;
  int w, h;
  io.Fonts->GetTexDataAsRGBA32(&px, &w, &h);
  io.DisplaySize = ImVec2(width, height);
  io.DeltaTime = 1.f / 60;
  return io;
}

}  // namespace braid::test
