#include "model/layer.h"

namespace tetra {

void Layer::ReleaseScratch() {
  for (Layer* sublayer : sublayers_) sublayer->ReleaseScratch();
  ReleaseOwnScratch();
}

void Layer::ReleaseActivations() {
  ClearSlots();
  for (Layer* sublayer : sublayers_) sublayer->ReleaseActivations();
  ReleaseOwnScratch();
}

}  // namespace tetra
