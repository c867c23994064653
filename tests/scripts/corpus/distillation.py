"""Knowledge distillation, as in Keras's example: a Distiller model holds a trained teacher and a student,
and overrides compute_loss (backend-neutral) to mix the student loss with a softened teacher/student
divergence.  python distillation.py MNIST.npz"""

import json
import sys

import keras
import numpy as np
from keras import ops

keras.utils.set_random_seed(0)
with np.load(sys.argv[1]) as data:
    x_train, y_train = data["x_train"][:1024].reshape(-1, 784).astype("float32") / 255, data["y_train"][:1024]
    x_test, y_test = data["x_test"][:256].reshape(-1, 784).astype("float32") / 255, data["y_test"][:256]


class Distiller(keras.Model):
    def __init__(self, student, teacher):
        super().__init__()
        self.teacher = teacher
        self.student = student

    def compile(self, optimizer, metrics, student_loss_fn, distillation_loss_fn, alpha=0.1, temperature=3):
        super().compile(optimizer=optimizer, metrics=metrics)
        self.student_loss_fn = student_loss_fn
        self.distillation_loss_fn = distillation_loss_fn
        self.alpha = alpha
        self.temperature = temperature

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, allow_empty=False):
        teacher_pred = self.teacher(x, training=False)
        student_loss = self.student_loss_fn(y, y_pred)
        distillation_loss = self.distillation_loss_fn(
            ops.softmax(teacher_pred / self.temperature, axis=1),
            ops.softmax(y_pred / self.temperature, axis=1),
        ) * (self.temperature**2)
        return self.alpha * student_loss + (1 - self.alpha) * distillation_loss

    def call(self, x):
        return self.student(x)


def mlp(width, name):
    return keras.Sequential([keras.Input((784,)), keras.layers.Dense(width, activation="relu"),
                             keras.layers.Dense(10)], name=name)


teacher, student = mlp(128, "teacher"), mlp(16, "student")
teacher.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy()])
teacher.fit(x_train, y_train, epochs=2, batch_size=64, verbose=0)
teacher_accuracy = teacher.evaluate(x_test, y_test, verbose=0)[1]

distiller = Distiller(student=student, teacher=teacher)
distiller.compile(optimizer="adam", metrics=[keras.metrics.SparseCategoricalAccuracy()],
                  student_loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  distillation_loss_fn=keras.losses.KLDivergence(), alpha=0.1, temperature=10)
distiller.fit(x_train, y_train, epochs=2, batch_size=64, verbose=0)
results = distiller.evaluate(x_test, y_test, verbose=0, return_dict=True)
print("metrics:", json.dumps({"teacher_accuracy": teacher_accuracy,
                              "student_accuracy": results["sparse_categorical_accuracy"]}))
