// Layer: the memory contract every layer of model/ keeps, so that whoever
// holds a layer (a block, a pipeline chunk, full recompute) can hand its
// memory back without knowing what it holds. A layer has
//  - activations: what its backward needs from its forward, one set per
//    micro-batch slot (ActivationSlots, activation_slots.h);
//  - scratch: buffers one forward or backward uses and the next overwrites,
//    shared by the slots;
//  - sublayers (AddSublayer), whose memory goes with its own.
// A layer names its own slots and scratch (ClearSlots, ReleaseOwnScratch);
// the base walks the sublayers. docs/writing_a_layer.md goes through it.
#ifndef TETRA_MODEL_LAYER_H_
#define TETRA_MODEL_LAYER_H_

#include <vector>

namespace tetra {

class Layer {
 public:
  Layer() = default;
  // Sublayers are held by address: a layer stays where it was built.
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;
  virtual ~Layer() = default;

  // Frees the scratch, its sublayers' too (selective recompute, after each
  // block's backward: one block's scratch at a time).
  void ReleaseScratch();
  // Frees every slot's activations and the scratch, its sublayers' too,
  // forgetting any forward whose backward has not run; the next forward
  // allocates anew.
  void ReleaseActivations();

 protected:
  // `sublayer`, a member of this layer, is released with it.
  void AddSublayer(Layer& sublayer) { sublayers_.push_back(&sublayer); }

 private:
  // This layer's own part of the two, its sublayers' aside.
  virtual void ClearSlots() = 0;
  virtual void ReleaseOwnScratch() {}

  std::vector<Layer*> sublayers_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_LAYER_H_
